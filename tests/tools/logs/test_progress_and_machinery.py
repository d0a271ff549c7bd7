"""Issue 31: the step a failure happened at, read back from the progress lines above it (tools/logs/progress.py), and
the exception taxonomy's `through` entries: a generic exception raised while a compiler stage ran.

The compile cases are real processes: torch's TorchScript frontend and tracer fail on this machine's torch, and the
log is what they printed. The progress cases are real excerpts (URLs beside them) and a long log made of a real
progress bar's lines and a real traceback below them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from tools.core.context import ToolContext
from tools.core.files import InputFile
from tools.core.limits import LOG_CHUNK_BYTES, PROGRESS_LOOKBACK_LINES
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, diagnose_logs
from tools.logs.progress import progress_in, steps_before

DATA = Path(__file__).resolve().parents[2] / "data" / "logs"

# https://github.com/bioinsilico/rcsb-embedding-search/issues/3 (development): a worker's KeyError, no step printed.
WORKER_TRACEBACK = DATA / "round14/dev/dataloader__bioinsilico-rcsb-embedding-search-3.log"
# https://github.com/aik2mlj/polyffusion/issues/2 (development): the tqdm bar the traceback followed.
BAR = "Epoch 0:  29% {n}/3597 [51:02<2:06:30,  2.96s/it]   "


def _diagnose(folder: Path, name: str) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(folder.resolve(),)))


def _serious(result: DiagnoseLogsResult, category: str) -> LogFinding:
    found = [f for f in result.findings if f.category == category and f.severity != "info"]
    assert found, [(f.category, f.severity) for f in result.findings]
    return found[0]


def test_a_segfault_glued_to_the_progress_bar_has_its_step() -> None:
    # https://github.com/threestudio-project/threestudio/issues/369: `4540/? [07:57` and the segfault on one line.
    path = DATA / "round13/dev/process_exit__threestudio-project-threestudio-369.log"
    finding = _serious(_diagnose(path.parent, path.name), "process_exit")
    assert (finding.facts["step"], finding.facts["step_line"]) == (4540, 1)


def test_the_last_step_above_a_failure_blocks_into_a_long_log(tmp_path: Path) -> None:
    bar_lines = LOG_CHUNK_BYTES * 2 // len(BAR) + 1000  # the failure is two read blocks in: read back across blocks
    lines = [BAR.format(n=n) for n in range(1, bar_lines + 1)]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n" + WORKER_TRACEBACK.read_text("utf-8"), "utf-8")
    finding = _serious(_diagnose(tmp_path, "train.log"), "dataloader")
    assert (finding.facts["step"], finding.facts["step_line"]) == (bar_lines, bar_lines)


def test_progress_too_far_above_is_not_the_failures_step(tmp_path: Path) -> None:
    filler = [f"INFO evaluating shard {n}" for n in range(PROGRESS_LOOKBACK_LINES + 10)]
    text = BAR.format(n=17) + "\n" + "\n".join(filler) + "\n" + WORKER_TRACEBACK.read_text("utf-8")
    (tmp_path / "train.log").write_text(text, "utf-8")
    assert "step" not in _serious(_diagnose(tmp_path, "train.log"), "dataloader").facts


def test_progress_needs_more_than_a_counter() -> None:
    assert progress_in(1, b"save_step: 500") is None  # a config line: a counter and nothing that shows progress
    reached = progress_in(3, b"iteration 272 | lm loss: 5.298 | lr: 1e-4")
    assert reached is not None and (reached.step, reached.line, reached.loss) == (272, 3, 5.298)
    redrawn = progress_in(9, b"  3/10 [00:01<00:03]\r  4/10 [00:02<00:02]")  # the bar's last drawing counts
    assert redrawn is not None and redrawn.step == 4


@pytest.mark.parametrize(("source", "rule", "severity", "exception"), [
    # TorchScript's frontend refusing a nested function: its own error type.
    ("""
     import torch

     def scale(x: torch.Tensor) -> torch.Tensor:
         def gen():
             yield x
         return next(gen())

     torch.jit.script(scale)
     """, "exception_compile_error", "crit", "torch.jit.frontend.UnsupportedNodeError"),
    # The tracer refusing an output it cannot type: a plain RuntimeError, raised in torch/jit/_trace.py.
    ("""
     import torch

     def describe(x: torch.Tensor):
         return {"mean": x.mean(), "name": "batch"}

     torch.jit.trace(describe, torch.ones(3))
     """, "exception_compile_through", "warn", "RuntimeError"),
])
def test_a_generic_exception_raised_in_a_compiler_stage_is_compile(tmp_path: Path, source: str, rule: str,
                                                                  severity: str, exception: str) -> None:
    script = tmp_path / "capture.py"
    script.write_text(textwrap.dedent(source), "utf-8")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0 and "torch/jit/" in run.stderr.replace("\\", "/"), run.stderr[-2000:]
    (tmp_path / "capture.log").write_text(run.stderr, "utf-8")
    finding = _serious(_diagnose(tmp_path, "capture.log"), "compile")
    assert (finding.rule, finding.severity, finding.facts["exception"]) == (rule, severity, exception)
    assert str(finding.facts["location"]).endswith("capture.py:" + ("9" if "script" in source else "7"))


def test_reading_back_ends_at_the_deadline_and_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    # The read-back opens the file a second time: past the call's deadline it reads nothing, and a path that became a
    # FIFO after the scan is refused on open (O_NONBLOCK + a regular-file check), not waited on.
    log = tmp_path / "train.log"
    log.write_text(BAR.format(n=5) + "\n" + WORKER_TRACEBACK.read_text("utf-8"), "utf-8")
    file = InputFile(path=log, name="train.log", rank=None)
    assert steps_before(file, [2], time.monotonic() + 30)[2].step == 5
    started = time.monotonic()
    assert steps_before(file, [2], started - 1) == {}
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    assert steps_before(InputFile(path=fifo, name="fifo.log", rank=None), [2], started + 30) == {}
    assert time.monotonic() - started < 5
