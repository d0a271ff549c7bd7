"""Our reading of real Nsight Systems exports against NVIDIA's own: `nsys stats --report cuda_gpu_kern_sum` for the
kernel totals and `nsys analyze` for the expert-system rules, on the same files, number for number. The nsys is
Debian's nsight-systems-target 2023.4 that scripts/test.sh unpacks into .cache/nsys (it reads newer exports too)."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA, REPO
from tools.core.context import ToolContext
from tools.traces.summary import SummarizeTraceInput, SummarizeTraceResult, breakdown, summarize_trace

NSYS = REPO / ".cache" / "nsys" / "usr" / "lib" / "x86_64-linux-gnu" / "nsight-systems" / "target-linux-x64" / "nsys"
FILES = DATA / "nsys" / "files"
# The real exports with GPU work (jacc has none; the planted-secret copy is mock's twin).
EXPORTS = ["nsysai-mfu-2gpu-before", "nsysai-mfu-2gpu-after", "nsysai-h100-2gpu-1s", "nsysai-mock",
           "flameox-nsight-2025-5-2", "fuser-cross-entropy-report1", "fuser-register-stealing-report1",
           "trixi-report1"]
RULES = ["cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync", "gpu_gaps", "gpu_time_util"]


@pytest.fixture(scope="module")
def nsys() -> Path:
    if not NSYS.is_file():
        pytest.fail(f"{NSYS} is missing: scripts/test.sh fetches Debian's nsight-systems-target into .cache/nsys")
    return NSYS


def _nsys_csv(nsys: Path, args: list[str], export: Path) -> list[dict[str, str]]:
    done = subprocess.run([str(nsys), *args, "--format", "csv", "-q", str(export)], capture_output=True, text=True,
                          timeout=120, check=True)
    lines = [line for line in done.stdout.splitlines() if line and not line.startswith(("Processing", "SKIPPED"))]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def _ours(export: Path) -> SummarizeTraceResult:
    return anyio.run(summarize_trace, SummarizeTraceInput(path=export.name), ToolContext(roots=(export.parent,)))


@pytest.mark.parametrize("case_id", EXPORTS)
def test_kernel_totals_match_nsys_stats(nsys: Path, case_id: str, tmp_path: Path) -> None:
    export, reference = tmp_path / f"{case_id}.sqlite", tmp_path / "reference.sqlite"
    shutil.copyfile(FILES / f"{case_id}.sqlite", export)
    shutil.copyfile(export, reference)  # nsys's own copy: it may add tables to the file it reads
    theirs = {row["Name"]: (int(row["Instances"]), round(int(row["Total Time (ns)"]) / 1e3, 3))
              for row in _nsys_csv(nsys, ["stats", "--report", "cuda_gpu_kern_sum"], reference)}
    # Every kernel, by its full name (copies and memsets are GPU work too, but not in this report; nor are whole
    # CUDA graph replays traced at graph level, which this report leaves out and we list beside the kernels).
    found = breakdown([export], (tmp_path,), False, time.monotonic() + 120)
    ours = {name: (count, round(total_us, 3)) for name, (count, total_us, _) in found.kernels.items()
            if not name.startswith(("Memcpy", "Memset", "CUDA graph "))}
    assert ours and ours == theirs


@pytest.mark.parametrize("case_id", EXPORTS)
def test_rules_match_nsys_analyze(nsys: Path, case_id: str, tmp_path: Path) -> None:
    export, reference = tmp_path / f"{case_id}.sqlite", tmp_path / "reference.sqlite"
    shutil.copyfile(FILES / f"{case_id}.sqlite", export)
    shutil.copyfile(export, reference)
    ours = {r.rule: r.count for r in _ours(export).nsys_rules}
    for rule in RULES:
        rows = _nsys_csv(nsys, ["analyze", "-r", f"{rule}:rows=1000000"], reference)
        assert ours.get(rule, 0) == len(rows), rule


def test_nsys_stats_csv_gives_the_same_kernel_totals_as_the_export(nsys: Path, tmp_path: Path) -> None:
    # nsys's own CSV of a real export (kernels, API, memory operations, with its 'Processing [...]' lines), read as
    # the partial view: the kernel totals equal what the export itself gives.
    reference = tmp_path / "reference.sqlite"
    shutil.copyfile(FILES / "nsysai-mfu-2gpu-before.sqlite", reference)
    done = subprocess.run([str(nsys), "stats", "--report", "cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum",
                           "--format", "csv", str(reference)], capture_output=True, text=True, timeout=120,
                          check=True)
    (tmp_path / "stats.csv").write_text(done.stdout)
    view = anyio.run(summarize_trace, SummarizeTraceInput(path="stats.csv"), ToolContext(roots=(tmp_path,)))
    assert view.ranks == [] and view.nsys_stats is not None
    assert view.nsys_stats.tables == ["cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum"]
    found = breakdown([FILES / "nsysai-mfu-2gpu-before.sqlite"], (FILES,), False, time.monotonic() + 120)
    from_export = sum(total for name, (_, total, _) in found.kernels.items()
                      if not name.startswith(("Memcpy", "Memset"))) / 1000
    assert view.nsys_stats.kernel_ms == pytest.approx(from_export, abs=0.01)
    syncs = sum(r.total_ms for r in view.nsys_stats.api if r.name.startswith("cudaStreamSynchronize"))
    assert view.nsys_stats.sync_api_ms == pytest.approx(syncs, abs=0.01) and syncs > 300
