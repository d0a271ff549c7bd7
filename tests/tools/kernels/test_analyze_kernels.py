"""analyze_kernels on real Nsight Compute results: three MIT-licensed reports from public repositories (read through
Debian's ncu 2024.1, which scripts/test.sh unpacks into .cache/ncu) and the CSV and text exports that ncu made of
them (tests/data/kernels/PROVENANCE.md).
Values are asserted against what ncu itself printed for the same report."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, base_env, run_cli, stdio_client
from tools.core.context import ToolContext
from tools.core.kernel_names import instance_form, is_mangled, ncu_kernel_filter, qualified_function
from tools.core.models import CoverageStatus, Severity
from tools.kernels import AnalyzeKernelsInput, AnalyzeKernelsResult, analyze_kernels
from tools.kernels.launches import parse_number, stated_stall
from tools.kernels.names import demangle
from tools.kernels.verdict import judge

pytestmark = pytest.mark.anyio

FILES = REPO / "tests" / "data" / "kernels" / "files"
NSYS = REPO / "tests" / "data" / "nsys" / "files"
NCU = REPO / ".cache" / "ncu" / "usr" / "lib" / "x86_64-linux-gnu" / "nsight-compute" / "target" / \
    "linux-desktop-glibc_2_11_3-x64" / "ncu"
# What the reports' session pages hold (ncu --import F --page session): never in our output.
SESSION_SECRETS = ("omnisky-447", "172.26.146.5", "172.26.21.68", "ug55", "i9-9900X", "--details-all")


@pytest.fixture
def ncu() -> Path:
    if not NCU.is_file():
        pytest.fail(f"{NCU} is missing: scripts/test.sh fetches Debian's nsight-compute-target into .cache/ncu")
    return NCU


async def analyze(*names: str, root: Path = FILES) -> AnalyzeKernelsResult:
    return await analyze_kernels(AnalyzeKernelsInput(files=list(names)), ToolContext(roots=(root,)))


def kernel(result: AnalyzeKernelsResult, prefix: str) -> dict[str, object]:
    row = next(k for k in result.kernels if k.name.startswith(prefix))
    return row.model_dump()


async def test_a_2020_report_read_through_ncu_is_latency_bound_with_its_stalls(ncu: Path) -> None:
    result = await analyze("speedy_scan-2020.3.ncu-rep")
    assert [c.status for c in result.coverage] == [CoverageStatus.read]
    [row] = result.kernels
    assert row.name.startswith("kernel(int const*, int*")
    assert (row.grid, row.block, row.launches) == ("(19532, 1, 1)", "(512, 1, 1)", 1)
    assert (row.sm_throughput_pct, row.memory_throughput_pct, row.dram_throughput_pct) == (49.01, 53.42, 53.42)
    assert row.duration_ns == 336704
    assert (row.achieved_occupancy_pct, row.theoretical_occupancy_pct, row.waves_per_sm) == (94.03, 100, 141.54)
    assert row.verdict == "latency_bound" and not row.borderline
    assert row.stalls[0].reason == "barrier" and 55 < row.stalls[0].pct < 65
    assert ("WRN", "SOLBottleneck") in {(r.type, r.name) for r in row.rules}  # what 2020.3 stored
    assert result.severity is Severity.warn and result.time_by_verdict == {"latency_bound": 100.0}
    assert "barrier" in row.why


async def test_compute_bound_and_latency_bound_weighted_by_time_and_no_session_data(ncu: Path) -> None:
    result = await analyze("yzwang-cudacode-2022.3.ncu-rep")
    a, c = kernel(result, "kernel_A"), kernel(result, "kernel_C")
    assert (a["sm_throughput_pct"], a["memory_throughput_pct"], a["verdict"]) == (80.3, 9.45, "compute_bound")
    assert (c["sm_throughput_pct"], c["memory_throughput_pct"], c["verdict"]) == (40.19, 40.56, "latency_bound")
    assert result.kernels[0].name.startswith("kernel_A") and result.kernels[0].share_pct == 99.9
    assert result.severity is Severity.ok and "compute-bound" in result.conclusion[0]
    text = result.model_dump_json()
    assert not [s for s in SESSION_SECRETS if s in text]


async def test_a_failed_launch_is_skipped_and_counted(ncu: Path) -> None:
    result = await analyze("esmm-2023.1-failed-launch.ncu-rep")
    assert result.skipped_launches == 1
    assert [k.name.split("(")[0] for k in result.kernels] == ["esmm_shmem_multi", "esmm_shmem_multi2",
                                                               "esmm_shmem_multi3"]
    multi2 = kernel(result, "esmm_shmem_multi2(")
    assert (multi2["sm_throughput_pct"], multi2["memory_throughput_pct"], multi2["verdict"]) == (97.72, 97.72,
                                                                                                 "balanced")
    assert kernel(result, "esmm_shmem_multi(")["occupancy_limiter"] == "shared memory"
    assert any("failed launch" in n for n in result.notes)


async def test_every_export_of_one_report_gives_the_same_figures(ncu: Path) -> None:
    report = await analyze("yzwang-cudacode-2022.3.ncu-rep")
    for export in ("yzwang-cudacode-details-20col.csv", "yzwang-cudacode-raw.csv"):
        result = await analyze(export)
        assert [c.status for c in result.coverage] == [CoverageStatus.read], export
        for prefix in ("kernel_A", "kernel_C"):
            ours, theirs = kernel(result, prefix), kernel(report, prefix)
            for key in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "duration_ns",
                        "achieved_occupancy_pct", "waves_per_sm", "verdict", "grid", "block"):
                assert ours[key] == theirs[key], (export, prefix, key)
    rules = kernel(await analyze("yzwang-cudacode-details-20col.csv"), "kernel_C")["rules"]
    assert isinstance(rules, list) and {"type": "WRN", "name": "SOLBottleneck"}.items() <= rules[0].items()


async def test_text_with_2020_sol_labels_and_a_summary_csv_in_auto_units() -> None:
    text = await analyze("speedy_scan-2020.3-sol-labels.txt")
    [row] = text.kernels
    assert (row.sm_throughput_pct, row.memory_throughput_pct, row.dram_throughput_pct) == (49.01, 53.42, 53.42)
    assert row.duration_ns == pytest.approx(336_700)  # "Duration usecond 336.70"
    assert row.verdict == "latency_bound"
    assert any(r.type == "WRN" and "low compute throughput" in r.message for r in row.rules)
    summary = await analyze("speedy_scan-summary.csv")
    [again] = summary.kernels
    assert (again.sm_throughput_pct, again.memory_throughput_pct, again.launches) == (49.01, 53.42, 1)
    assert again.duration_ns == pytest.approx(336_700)


def test_a_configured_ncu_that_is_not_there_is_unknown_naming_the_command(tmp_path: Path) -> None:
    # The CLI as a process, with GPU_TRIAGE_NCU naming a folder that holds no ncu: an explicit choice is never
    # replaced by another ncu on the host, and the report is unknown (exit 4), naming the command that decides.
    report = tmp_path / "job.ncu-rep"
    report.write_bytes((FILES / "speedy_scan-2020.3.ncu-rep").read_bytes())
    env = base_env(GPU_TRIAGE_NCU=str(tmp_path / "nowhere"))
    done = run_cli(["analyze-kernels", "job.ncu-rep", "--root", str(tmp_path), "--json"], env)
    assert done.returncode == 4, done.stderr
    result = json.loads(done.stdout)
    assert result["severity"] == "unknown" and result["kernels"] == []
    assert "GPU_TRIAGE_NCU" in result["coverage"][0]["detail"]
    assert "ncu --import job.ncu-rep --csv --page raw" in result["decides"]
    assert result["coverage"][0]["status"] == "not_understood"


def test_a_configured_ncu_is_used_when_none_is_on_path(ncu: Path, tmp_path: Path) -> None:
    env = base_env(GPU_TRIAGE_NCU=str(ncu), PATH=str(tmp_path))  # no ncu on PATH: the configured one reads it
    done = run_cli(["analyze-kernels", "speedy_scan-2020.3.ncu-rep", "--root", str(FILES), "--json"], env)
    assert done.returncode in (0, 1, 2), done.stderr
    assert json.loads(done.stdout)["kernels"][0]["verdict"] == "latency_bound"


async def test_a_file_that_is_no_ncu_output_is_not_understood(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("Compute (SM) Throughput was about 83 % on the RTX 3070\n")
    result = await analyze("notes.txt", root=tmp_path)
    assert result.severity is Severity.unknown and result.coverage[0].status is CoverageStatus.not_understood


def test_the_verdict_follows_nvidias_rule_on_real_figures() -> None:
    # Figures of real launches (AveryClapp/ESMM-Research profile.ncu-rep, ncu 2023.1.1, A10-class GPU).
    l1_bound = judge({"sm_pct": 11.82, "memory_pct": 97.50, "dram_pct": 0.46, "l1_pct": 97.50, "l2_pct": 12.0}, [])
    assert l1_bound.verdict == "memory_bound" and l1_bound.cause == "l1" and "not DRAM" in l1_bound.why
    dram_bound = judge({"sm_pct": 19.50, "memory_pct": 91.68, "dram_pct": 91.68}, [])  # LakshyaSingh354 vec_add
    assert dram_bound.verdict == "memory_bound" and dram_bound.cause == "dram"
    small = judge({"sm_pct": 0.25, "memory_pct": 0.88, "waves_per_sm": 0.01, "grid_blocks": 4,
                   "achieved_occupancy_pct": 3.23, "theoretical_occupancy_pct": 50.0}, [])
    assert small.verdict == "latency_bound" and small.cause == "small_grid" and "grid of 4 blocks" in small.why
    near = judge({"sm_pct": 58.94, "memory_pct": 62.17}, [])  # one_warptiling: max 62.17, 2.2 from the line
    assert near.verdict == "balanced" and near.borderline
    assert judge({"memory_pct": 50.0}, []).verdict == "unknown"


async def test_through_the_mcp_client(ncu: Path) -> None:
    async with stdio_client(base_env(), "--root", str(FILES)) as client:
        answer = await client.call_tool("analyze_kernels", {"files": ["yzwang-cudacode-2022.3.ncu-rep",
                                                                      "speedy_scan-2020.3-sol-labels.txt"]})
    shown = "".join(getattr(part, "text", "") for part in answer.content)
    assert answer.is_error is False, shown
    data = answer.structured_content
    assert data is not None
    verdicts = {k["name"].split("(")[0]: k["verdict"] for k in data["kernels"]}
    assert verdicts == {"kernel_A": "compute_bound", "kernel_C": "latency_bound", "kernel": "latency_bound"}
    shown += json.dumps(data)
    assert not [s for s in SESSION_SECRETS if s in shown]


def test_a_fifo_named_like_a_report_is_refused_before_ncu_starts(ncu: Path, tmp_path: Path) -> None:
    # ncu opens the path itself: a FIFO with no writer must not reach it (it would wait, or blame the version).
    os.mkfifo(tmp_path / "job.ncu-rep")
    started = time.monotonic()
    done = run_cli(["analyze-kernels", "job.ncu-rep", "--root", str(tmp_path), "--timeout", "10", "--json"],
                   base_env(GPU_TRIAGE_NCU=str(ncu)), timeout=30)
    assert time.monotonic() - started < 10 and done.returncode == 4, done.stderr
    result = json.loads(done.stdout)
    assert result["coverage"][0]["status"] == "not_understood" and "is a FIFO" in result["coverage"][0]["detail"]


async def test_stalls_from_the_warp_state_breakdown_in_text_and_csv_equal_the_reports(ncu: Path) -> None:
    # `ncu --import ... --print-details all` prints the Warp State Statistics breakdown ("Stall Barrier inst 20.53")
    # in text and CSV: the same metrics the report's raw page holds, so the same top three.
    report = (await analyze("speedy_scan-2020.3.ncu-rep")).kernels[0].stalls
    assert [(s.reason, s.pct) for s in report] == [("barrier", 59.4), ("long_scoreboard", 15.1), ("wait", 8.1)]
    for export in ("speedy_scan-2020.3-details-all-excerpt.txt", "speedy_scan-2020.3-details-all-excerpt.csv"):
        [row] = (await analyze(export)).kernels
        assert row.stalls == report, export
        assert "barrier" in row.why and row.verdict == "latency_bound"


async def test_the_top_stall_as_the_warp_state_rule_states_it() -> None:
    # Without the breakdown, text and details output keep the rule's own figure: "spends 20.5 cycles being stalled
    # waiting for sibling warps at a CTA barrier. This represents about 58.0% of the total average of 35.4 cycles".
    for export in ("speedy_scan-2020.3-sol-labels.txt", "speedy_scan-2020.3-details.csv"):
        [row] = (await analyze(export)).kernels
        assert [(s.reason, s.pct) for s in row.stalls] == [("barrier", 58.0)], export
        assert "top stall barrier" in row.why


def test_stated_stalls_of_other_reasons_and_wordings() -> None:
    # Rule texts (CPIStall) as stored in two development reports of the accuracy set (LakshyaSingh354/CudaCode
    # gemm/reps/naive.ncu-rep, blob 7bc2a745; eschnett/IndexSpaces.jl profile.ncu-rep, blob 3176628c; read through
    # ncu 2024.1): the first gives no share, the second does.
    lg = stated_stall("On average, each warp of this kernel spends 23.9 cycles being stalled waiting for the L1 "
                      "instruction queue for local and global (LG) memory operations to be not full. Typically, this "
                      "stall occurs only when executing local or global memory instructions extremely frequently.")
    assert lg == ("lg_throttle", 23.9, None)
    drain = stated_stall("On average, each warp of this kernel spends 24.3 cycles being stalled waiting after an "
                         "EXIT instruction for all outstanding memory instructions to complete so that the warp's "
                         "resources can be freed. This represents about 52.7% of the total average of 46.1 cycles "
                         "between issuing two instructions.")
    assert drain == ("drain", 24.3, 52.7)
    # Another rule of the same section (speedy_scan-2020.3-sol-labels.txt, Scheduler Statistics) is no stall.
    assert stated_stall("Every scheduler is capable of issuing one instruction per cycle, but for this kernel each "
                        "scheduler only issues an instruction every 3.3 cycles.") is None


def test_numbers_in_the_swedish_locale_of_2020_profile_time_text() -> None:
    # nv-nsight-cu-cli output pasted in hpc2n/gpu-course (2020-Nov, Kebnekaise V100): decimal commas and spaces as
    # thousands separators ("SM Active Cycles  cycle  23 111 929,56").
    assert parse_number("23 111 929,56") == 23_111_929.56
    assert parse_number("23 982 976") == 23_982_976
    assert parse_number("866,86") == 866.86
    assert parse_number("1,196,204") == 1_196_204


async def test_mangled_names_are_demangled_by_cxxfilt(ncu: Path) -> None:
    # `ncu --import ... --print-kernel-base mangled` prints _Z8kernel_APdii: shown demangled, with the figures of the
    # same kernels in the demangled export.
    mangled = await analyze("yzwang-cudacode-details-mangled.csv")
    plain = await analyze("yzwang-cudacode-details-20col.csv")
    assert [k.name for k in mangled.kernels] == ["kernel_A(double*, int, int)", "kernel_C(double*, double const*, int)"]
    assert [c.status for c in mangled.coverage] == [CoverageStatus.read]
    for ours, theirs in zip(mangled.kernels, plain.kernels, strict=True):
        assert qualified_function(ours.name) == qualified_function(theirs.name)
        assert (ours.sm_throughput_pct, ours.memory_throughput_pct, ours.verdict) == (
            theirs.sm_throughput_pct, theirs.memory_throughput_pct, theirs.verdict)


def test_without_cxxfilt_mangled_names_stay_and_coverage_says_so(tmp_path: Path) -> None:
    # A PATH with python but no c++filt: the names are kept as ncu printed them, the file is read in part.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").symlink_to(sys.executable)
    done = run_cli(["analyze-kernels", "yzwang-cudacode-details-mangled.csv", "--root", str(FILES), "--json"],
                   base_env(PATH=str(tmp_path / "bin")))
    assert done.returncode in (0, 1, 2, 4), done.stderr
    result = json.loads(done.stdout)
    assert [k["name"] for k in result["kernels"]] == ["_Z8kernel_APdii", "_Z8kernel_CPdPKdi"]
    [entry] = result["coverage"]
    assert entry["status"] == "partial" and "no c++filt" in entry["detail"]


async def test_real_mangled_names_demangled_as_nsys_demangled_them() -> None:
    # The kernel table of a real Nsight Systems export keeps each kernel's mangled and demangled name (NVIDIA's
    # demangler): c++filt's spelling differs (anonymous namespaces, casts, parameters as T2) but names the same
    # function, and the same template instance.
    with sqlite3.connect(f"file:{NSYS / 'fuser-register-stealing-report1.sqlite'}?mode=ro", uri=True) as db:
        pairs = db.execute("SELECT DISTINCT m.value, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds m ON "
                           "m.id = k.mangledName JOIN StringIds d ON d.id = k.demangledName").fetchall()
    mangled = [(m, d) for m, d in pairs if is_mangled(m)]
    assert len(mangled) == 14
    found = await demangle([m for m, _ in mangled], 30)
    assert found.kept == 0 and len(found.names) == 14
    for symbol, nvidia in mangled:
        assert qualified_function(found.of(symbol)) == qualified_function(nvidia), symbol
    assert sum(instance_form(found.of(s)) == instance_form(n) for s, n in mangled) == 13


async def test_the_ncu_filter_selects_exactly_the_kernels_it_names(ncu: Path, tmp_path: Path) -> None:
    # Kernel filters apply on import too: the -k argument the tool writes (bare function names, anchored), run by
    # ncu itself on a report of esmm_shmem_multi, esmm_shmem_multi2 and esmm_shmem_multi3, selects the one named,
    # not the other two its name begins.
    names = [k.name for k in (await analyze("esmm-2023.1-failed-launch.ncu-rep")).kernels]
    for wanted in ([names[0]], names[1:]):
        target = ncu_kernel_filter(wanted)
        assert target is not None and target.startswith("regex:'^(") and target.endswith(")$'")
        argv = [str(ncu), "--import", str(FILES / "esmm-2023.1-failed-launch.ncu-rep"), "-k", target.replace("'", ""),
                "--csv", "--page", "raw", "--metrics", "gpu__time_duration.sum"]
        env = base_env(HOME=str(tmp_path), NV_COMPUTE_PROFILER_DISABLE_STOCK_FILE_DEPLOYMENT="1")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = list(csv.reader(line for line in done.stdout.splitlines() if not line.startswith("==")))
        picked = [row[rows[0].index("Kernel Name")] for row in rows[2:]]
        assert picked == wanted
