"""find_stragglers on a real straggler: the fault lab's 4-rank gloo DDP job where rank 2's forward takes 60 ms longer
(tests/lab/straggler_steps.py), run twice by this module: with the slow rank and without (healthy). Each run writes
per-rank logs (step time and compute time) and torch.profiler CPU traces. Plus real-format lines of each framework
(tests/data/logs/steps) and generated logs for asynchronous setups, noise, trends and periodic spikes. The GPU check
uses the NVML stand-in (this machine has no GPU), as every GPU test here does.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, REPO, base_env, h100, run_cli, stdio_client, with_fake_nvml, write_scenario
from tools.core.context import ToolContext
from tools.core.errors import BadInput
from tools.core.models import Severity
from tools.steps import read_steps
from tools.stragglers.find import FindStragglersInput, FindStragglersResult, find_stragglers

pytestmark = pytest.mark.anyio

LAB = REPO / "tests" / "lab" / "straggler_steps.py"
STEPS = DATA / "logs" / "steps"


def run_lab(folder: Path, slow_rank: int) -> Path:
    folder.mkdir(parents=True)
    # 60 ms extra (twice the lab default): the signal must stand above 4 ranks sharing 2 loaded cores in CI.
    env = dict(os.environ, LAB_SLOW_RANK=str(slow_rank), LAB_EXTRA_MS="60", LAB_STEPS="20",
               LAB_RANK_LOG_DIR=str(folder / "logs"), LAB_TRACE_DIR=str(folder / "traces"), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                           str(LAB)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in (folder / "traces").iterdir()) == [f"rank{r}.json" for r in range(4)]
    return folder


@pytest.fixture(scope="module")
def lab_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("straggler_lab")
    yield run_lab(base / "slow", 2), run_lab(base / "healthy", -1)


def analyse(root: Path, **args: Any) -> FindStragglersResult:
    params = FindStragglersInput.model_validate(args)
    return anyio.run(find_stragglers, params, ToolContext(roots=(root.resolve(),)))


VIEWS = {"logs": {"logs": ["logs/rank*.log"]}, "traces": {"traces": ["traces"]},
         "both": {"logs": ["logs/rank*.log"], "traces": ["traces"]}}


async def test_lab_straggler_through_the_mcp_client(lab_runs: tuple[Path, Path]) -> None:
    slow, healthy = lab_runs
    async with stdio_client(base_env(), "--root", str(slow.parent)) as client:
        results = {(run.name, view): await client.call_tool("find_stragglers", {
            k: [f"{run.name}/{p}" for p in v] for k, v in args.items()})
            for run in (slow, healthy) for view, args in VIEWS.items()}
        # The step-time-only view: the same logs read with a regex that sees only the step time.
        step_only = await client.call_tool("find_stragglers", {
            "logs": ["slow/logs/rank*.log"], "step_regex": r"step (?P<step>\d+) time (?P<step_ms>[\d.]+) ms"})
    for (run, view), result in results.items():
        assert result.is_error is False, result.content[0].text
        data = result.structured_content
        assert data is not None
        if run == "slow":
            assert [(f["rank"], f["kind"]) for f in data["flagged"]] == [(2, "compute_slow")], (view, data["flagged"])
            assert data["waited_on_rank"] == 2 and data["verdict"] == "straggler"
            assert data["flagged"][0]["severity"] == "crit" and data["flagged"][0]["compute_deviation_pct"] > 100
            assert "Rank 2 computes slowly" in data["conclusion"][0]
            if view != "logs":  # the trace shows it waits least in the collective
                assert "the least of all ranks: the others wait for it" in data["flagged"][0]["evidence"]
                waits = {r["rank"]: r["wait_ms"] for r in data["ranks"]}
                assert waits[2] == min(waits.values())
        else:
            assert data["flagged"] == [] and data["verdict"] == "none" and data["severity"] == "ok", (view, data)
        assert data["ranks_summary"]["count"] == 4
    only = step_only.structured_content
    assert only is not None and only["flagged"] == [] and only["verdict"] == "inconclusive"
    assert "step times cannot show a straggler" in only["conclusion"][0]
    # The synchronisation makes step times equal: their spread is small next to rank 2's +60 ms of compute.
    assert only["ranks_summary"]["spread_pct"] < 15


def test_every_framework_format_is_read() -> None:
    def read(name: str) -> list[tuple[int, str, list[int], list[float]]]:
        found, _ = read_steps(STEPS / name, name, time.monotonic() + 10, None)
        return [(r.rank, r.format, list(r.step_numbers), [round(v, 1) for v in r.steps]) for r in found]

    assert read("megatron.log") == [(0, "megatron", [43, 201], [5444.9, 139113.4])]
    assert read("torchtitan_ranks.log") == [(0, "torchtitan", [14], [137.3]), (1, "torchtitan", [200], [170.8])]
    assert read("hf_trainer_tqdm.log") == [(0, "tqdm", [100, 200, 1000], [250.0, 250.0, 231.5])]
    assert read("lightning_tqdm.log") == [(0, "tqdm", [4, 3744], [4470.0, 3125.0])]
    assert read("deepspeed_rank0.log") == [(0, "deepspeed", [10], [38904.0])]
    assert read("keyvalue_rank3.log") == [(3, "plain", [15, 16, 17], [37.7, 38.1, 40.2])]
    # `time` without a unit beside `data_time` is seconds (detectron2, mmcv, mmengine), not 0.33 ms; mmcv's counter
    # restarts each epoch, so the run's step is counted across epochs; the evaluation line (`Epoch(val)`) is no step.
    assert read("detectron2.log") == [(0, "openmmlab", [1259, 1279, 1299], [332.2, 332.3, 332.3])]
    assert read("mmcls_epochs.log") == [(0, "openmmlab", [10, 20, 30, 45, 55, 65],
                                         [611.0, 402.0, 402.0, 592.0, 403.0, 403.0])]
    assert read("mmengine.log") == [(0, "openmmlab", [10, 20, 30], [10.0, 5.0, 4.0])]
    assert read("maskrcnn_benchmark.log") == [(0, "openmmlab", [26000], [962.8])]  # `data:` beside it, (avg) after
    # JSON metric rows of the same frameworks: seconds too.
    assert read("dinov2_metrics.json") == [(0, "json_metrics", [120, 130], [3607.0, 3419.3])]
    assert read("detectron_json_stats.log") == [(0, "json_metrics", [55080], [266.5])]
    lab, fast = read_steps(DATA / "logs" / "lab" / "straggler_steps" / "rank2.log", "rank2.log", time.monotonic() + 10,
                           None)
    assert fast is not None  # the lab's per-rank logs take the fast path
    assert lab[0].rank == 2 and len(lab[0].steps) == 30 and len(lab[0].compute) == 30
    assert lab[0].steps[0] == 60.7 and lab[0].compute[0] == 37.6  # the first line of the recorded log


def _write_logs(folder: Path, medians: dict[int, float], steps: int = 200, noise: float = 0.02, seed: int = 1,
                extra: dict[int, dict[int, float]] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for rank, median in medians.items():
        lines = []
        for step in range(1, steps + 1):
            value = median * (1 + rng.gauss(0, noise)) + (extra or {}).get(rank, {}).get(step, 0.0)
            lines.append(f"2026-11-29 12:00:00 INFO step={step} step_time_ms={value:.2f} loss=1.0\n")
        (folder / f"rank{rank}.log").write_text("".join(lines))


def test_asynchronous_step_times_flag_the_slow_ranks_and_noise_flags_nothing(tmp_path: Path) -> None:
    medians = dict.fromkeys(range(8), 100.0) | {5: 120.0, 1: 107.0}
    _write_logs(tmp_path / "async", medians)
    result = analyse(tmp_path, logs=["async/*.log"])
    assert [(f.rank, f.severity.value, f.kind) for f in result.flagged] == [(5, "crit", "unknown"),
                                                                            (1, "warn", "unknown")]
    assert 18 < (result.flagged[0].deviation_pct or 0) < 22
    assert "no compute timing" in result.conclusion[0]
    for seed in range(5):  # healthy runs with a few % of noise: never a flag
        _write_logs(tmp_path / f"noise{seed}", dict.fromkeys(range(16), 100.0), noise=0.04, seed=seed)
        healthy = analyse(tmp_path, logs=[f"noise{seed}/*.log"])
        assert healthy.flagged == [] and healthy.verdict == "inconclusive", seed


def test_trend_and_periodic_spikes(tmp_path: Path) -> None:
    spikes = {3: {s: 400.0 for s in range(50, 201, 50)}}
    _write_logs(tmp_path / "s", dict.fromkeys(range(4), 100.0), extra=spikes)
    rows = {r.rank: r for r in analyse(tmp_path, logs=["s/*.log"]).ranks}
    assert (rows[3].spikes, rows[3].spike_period) == (4, 50)
    assert rows[0].spikes == 0
    slower = {0: {s: 0.3 * s for s in range(1, 201)}}  # rank 0 gets slower step after step
    _write_logs(tmp_path / "t", dict.fromkeys(range(4), 100.0), extra=slower)
    trend = {r.rank: r for r in analyse(tmp_path, logs=["t/*.log"]).ranks}
    assert (trend[0].trend_pct or 0) > 30 and abs(trend[1].trend_pct or 0) < 5


def test_the_flagged_ranks_gpu_is_checked(lab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    # NVML stand-in: four GPUs, GPU 2 hot and throttled (hw thermal slowdown) at 1400 of 1980 MHz.
    scenario = write_scenario(tmp_path / "gpus.json", [h100(bus_id=f"00000000:{18 + i:02X}:00.0") for i in (0, 1)]
                              + [h100(bus_id="00000000:1A:00.0", temperature=92, sm_clock=1400, throttle_mask=0x40)]
                              + [h100(bus_id="00000000:1B:00.0")])
    env = with_fake_nvml(base_env(PATH="/usr/bin:/bin"), scenario)
    slow = lab_runs[0]
    done = run_cli(["find-stragglers", "--logs", "logs/rank*.log", "--sample-gpus", "--json", "--root", str(slow)], env)
    data = json.loads(done.stdout)
    assert done.returncode == 2, done.stderr
    checks = [h["check"] for h in data["hardware"]]
    assert checks and all(c.startswith("GPU 2 ") for c in checks), checks
    assert any("temperature" in c for c in checks) and any("throttl" in c or "clock" in c for c in checks)
    assert data["conclusion"][-1].startswith("Its GPU: GPU 2")


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="give logs"):
        analyse(tmp_path)
    with pytest.raises(BadInput, match="named group step_ms or step_s"):
        analyse(tmp_path, logs=["x"], step_regex=r"step (\d+)")
    (tmp_path / "empty.log").write_text("nothing here\n")
    with pytest.raises(BadInput, match="no step time found"):
        analyse(tmp_path, logs=["empty.log"])


def test_a_rank_slow_with_normal_compute_waits(tmp_path: Path) -> None:
    # Pipeline-like: rank 3's step is 20% longer but its compute is the same as everyone's: it waits.
    folder = tmp_path / "w"
    folder.mkdir()
    rng = random.Random(7)
    for rank in range(4):
        lines = [f"rank {rank} step {s} time {(120 if rank == 3 else 100) * (1 + rng.gauss(0, 0.01)):.1f} ms "
                 f"(compute {60 * (1 + rng.gauss(0, 0.01)):.1f} ms)\n" for s in range(1, 101)]
        (folder / f"rank{rank}.log").write_text("".join(lines))
    result = analyse(tmp_path, logs=["w/*.log"])
    assert [(f.rank, f.kind, f.severity.value) for f in result.flagged] == [(3, "wait_slow", "crit")]
    assert result.waited_on_rank is None
    assert "its compute is normal" in result.flagged[0].evidence
    assert result.next_steps[0].action.startswith("check_interconnect") and result.next_steps[0].step == "network"


def test_a_thousand_ranks_stay_within_the_budget(tmp_path: Path) -> None:
    medians = dict.fromkeys(range(1000), 100.0) | {517: 130.0}
    _write_logs(tmp_path / "big", medians, steps=40, noise=0.01)
    done = run_cli(["find-stragglers", "--logs", "big/*.log", "--root", str(tmp_path)], base_env())
    assert done.returncode == 2, done.stderr
    text = done.stdout
    assert len(text.encode()) <= 8192 and "| 517 | unknown | crit |" in text
    assert "All ranks: distribution of the per-rank medians" in text and "| step ms | 1000 |" in text
    assert "rows of `ranks` not shown" in text


# ------------------------------------------------------------------------- cross-rank claims need every rank

SAMPLES = REPO / "mcp_server" / "samples"
LAB_STEPS = DATA / "logs" / "lab" / "straggler_steps"


def test_the_demo_joins_no_trace_of_another_job_and_claims_no_agreement() -> None:
    # The demo's inputs: logs of the 4-rank hang (2026) and a ResNet trace of another job (2021), rank 0 by name.
    result = analyse(SAMPLES, logs=["logs/rank*.log"], traces=["traces"])
    trace = "traces/worker0.1623143089861.pt.trace.json.gz"
    assert result.severity is Severity.unknown and result.verdict == "inconclusive"
    assert result.set_apart == [trace]
    status = {c.input: c.status.value for c in result.coverage}
    assert status == {f"logs/rank{r}.log": "read" for r in range(4)} | {trace: "not_understood"}
    assert "another run's" in next(c.detail for c in result.coverage if c.input == trace)
    text = " ".join(result.conclusion)
    assert "No straggler" not in text and "compute times agree" not in text
    assert "spread 26.8%" in text and "cannot show a straggler" in text and "recorded 2021-06-08" in text
    assert all(r.compute_ms is None for r in result.ranks)  # the other job's compute is joined to no rank
    assert result.decides == "Compute-only times (or traces) of all 4 ranks."


def test_one_rank_of_four_cannot_tell(tmp_path: Path) -> None:
    # The real log of the lab's slow rank alone: its own line says `rank 2/4`, so three ranks are missing.
    result = analyse(LAB_STEPS, logs=["rank2.log"])
    assert result.severity is Severity.unknown and result.verdict == "inconclusive" and result.flagged == []
    assert result.ranks_summary.world_size == 4
    assert [(c.input, c.status.value) for c in result.coverage] == [("rank2.log", "read")]
    assert "rank 2's step times were read of the 4 the job has (not read: ranks 0-1,3)" in result.conclusion[0]
    assert result.decides == "Step-time logs or traces of all 4 ranks, not of one."


def test_three_healthy_ranks_of_four_are_no_all_clear() -> None:
    # Ranks 0, 1 and 3 of the straggler run agree in compute; rank 2, the straggler, is the one not given.
    result = analyse(LAB_STEPS, logs=["rank[013].log"])
    assert result.severity is Severity.unknown and result.verdict == "inconclusive"
    assert "may be among those not read" in result.conclusion[0] and "rank 2" in result.conclusion[0]
    assert result.decides == "Compute-only times (or traces) of all 4 ranks; missing for rank 2."
    every = analyse(LAB_STEPS, logs=["rank[0-3].log"])  # with rank 2 it is found
    assert [(f.rank, f.kind) for f in every.flagged] == [(2, "compute_slow")]


def test_compute_of_one_rank_of_four_is_not_every_ranks(lab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    # The straggler run (rank 2 computes 30 ms longer): step times of all four ranks, compute (a trace) of rank 0
    # only. Said before: "No straggler: the 4 ranks' compute times agree" -- of one rank's compute.
    slow = lab_runs[0]
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "rank0.json").write_bytes((slow / "traces" / "rank0.json").read_bytes())
    for log in (slow / "logs").iterdir():
        (tmp_path / log.name).write_bytes(log.read_bytes())
    result = analyse(tmp_path, logs=["rank*.log"], traces=["traces"],
                     step_regex=r"step (?P<step>\d+) time (?P<step_ms>[\d.]+) ms")
    assert result.severity is Severity.unknown and result.verdict == "inconclusive" and result.set_apart == []
    assert "compute times agree" not in " ".join(result.conclusion)
    assert result.conclusion[1].startswith("Compute-only times were read for rank 0 only, of the 4 ranks")
    assert result.decides == "Compute-only times (or traces) of all 4 ranks; missing for ranks 1-3."
    assert {c.input: c.status.value for c in result.coverage} == {
        **{f"rank{r}.log": "read" for r in range(4)}, "traces/rank0.json": "read"}
