"""The step lines telemetry_history reads for step_change: tools/steps' formats with the time each line was logged,
on the real step logs of tests/data/logs/steps (PROVENANCE.md there), and when a job slowed from such lines."""

from __future__ import annotations

import calendar
import math
import time
from pathlib import Path

import numpy as np

from tests.helpers import DATA
from tools.steps import StampedSteps, read_stamped_steps
from tools.telemetry.step_change import JobSteps, slowdown

STEPS = DATA / "logs" / "steps"


def read(name: str, offset_s: float | None = 0.0) -> list[StampedSteps]:
    path = STEPS / name
    return read_stamped_steps(path, name, time.monotonic() + 30, utc_offset_s=offset_s)


def unix(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


def test_the_times_of_real_step_lines() -> None:
    # DeepSpeed: "[2023-11-07 01:55:23,714] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, ..."
    [deepspeed] = read("deepspeed_rank0.log")
    assert (deepspeed.format, deepspeed.numbers.tolist(), deepspeed.naive, deepspeed.zoned) == ("deepspeed", [10], 1, 0)
    assert math.isclose(deepspeed.times[0], unix("2023-11-07 01:55:23") + 0.714)
    # Megatron-LM: " [2024-04-06 02:59:36] iteration 43/ 100 | ..." then a line of another run without a time.
    [megatron] = read("megatron.log")
    assert megatron.numbers.tolist() == [43, 201] and megatron.times[0] == unix("2024-04-06 02:59:36")
    assert math.isnan(megatron.times[1])
    # torchtitan under torchrun: each line's rank from its "[rankN]:" prefix, the time after "[titan]".
    ranks = {s.rank: s for s in read("torchtitan_ranks.log")}
    assert sorted(ranks) == [0, 1]
    assert math.isclose(ranks[0].times[0], unix("2026-05-18 16:04:46") + 0.338)
    # The same naive times in a zone 8 hours east are 8 hours earlier in UTC.
    [east] = read("deepspeed_rank0.log", offset_s=8 * 3600)
    assert math.isclose(east.times[0], deepspeed.times[0] - 8 * 3600)
    # key=value lines carry no time of day: every time is NaN, none is made up.
    [plain] = read("keyvalue_rank3.log")
    assert plain.rank == 3 and plain.values.tolist()[:2] == [37.7, 38.1] and np.isnan(plain.times).all()


def job(values: list[float]) -> JobSteps:
    times = np.arange(len(values), dtype=np.float64) * 10 + 1_768_000_000
    return JobSteps(times, np.array(values), np.arange(len(values), dtype=np.int64) * 10, "ms", 1, len(values))


def test_a_sustained_rise_is_a_slowdown_and_a_single_slow_step_is_not() -> None:
    steady = [800.0 + (i % 3) * 10 for i in range(40)]
    checkpoint = list(steady)
    checkpoint[25] = 4000.0  # one step that writes a checkpoint
    assert slowdown(job(checkpoint)) is None
    risen = steady[:30] + [1200.0] * 10 + steady[:5]
    found = slowdown(job(risen))
    assert found is not None
    assert (found.step, found.before, found.after) == (300, 810.0, 1200.0)
    assert found.recovered_at == 1_768_000_000 + 40 * 10
    # 10 % slower is within what this project calls noise for a job (the straggler line is 15 %).
    assert slowdown(job(steady[:30] + [890.0] * 10)) is None


def test_a_log_without_step_lines_has_none(tmp_path: Path) -> None:
    (tmp_path / "notes.log").write_text("2026-01-10 03:00:00,000 INFO nothing about steps here\n" * 5)
    assert read_stamped_steps(tmp_path / "notes.log", "notes.log", time.monotonic() + 10) == []
