"""analyze_kernels with a trace beside the ncu results (`trace`): the join by kernel name, each kernel's share of the
trace's GPU time, and the trace's kernels with no ncu data.

No committed ncu result shares a kernel with a committed GPU trace (the ncu fixtures are CUDA exercises, the traces
PyTorch, nvFuser and Julia jobs; tests/data/kernels/PROVENANCE.md), so the join is tested three ways on real data:
an ncu export with a real trace of another job (nothing matches, every trace kernel is listed as unprofiled, and the
answer is unknown), the same names spelled by two demanglers (the mangled and demangled names that a real Nsight
Systems export keeps for each of its kernels), and names cut short as the tools' own tables cut them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.helpers import REPO, base_env, run_cli
from tools.core.context import ToolContext
from tools.core.kernel_names import bare_function
from tools.core.models import CoverageStatus, Severity
from tools.kernels import AnalyzeKernelsInput, analyze_kernels
from tools.kernels.names import demangle
from tools.kernels.trace_join import join, read_trace_kernels
from tools.traces import SummarizeTraceInput, summarize_trace

pytestmark = pytest.mark.anyio

DATA = REPO / "tests" / "data"
BUSY = "nsys/files/nsysai-mfu-2gpu-before.sqlite"  # 2 ranks of a training job, flash-attention kernels on top
FUSER = DATA / "nsys" / "files" / "fuser-register-stealing-report1.sqlite"


async def test_a_trace_of_another_job_lists_its_kernels_as_unprofiled_and_the_answer_is_unknown() -> None:
    ctx = ToolContext(roots=(DATA,))
    result = await analyze_kernels(AnalyzeKernelsInput(files=["kernels/files/yzwang-cudacode-raw.csv"], trace=BUSY),
                                   ctx)
    summary = await summarize_trace(SummarizeTraceInput(path=BUSY), ToolContext(roots=(DATA,)))
    assert [c.status for c in result.coverage] == [CoverageStatus.read, CoverageStatus.read]
    assert result.coverage[1].detail.startswith("--trace: Nsight Systems export")
    # The ncu verdicts stand for the profiled kernels, but none of them is in the trace: not ok, unknown.
    assert [k.verdict for k in result.kernels] == ["compute_bound", "latency_bound"]
    assert all(k.trace_share_pct is None for k in result.kernels) and result.trace_profiled_pct == 0.0
    assert result.severity is Severity.unknown
    assert any("None of the profiled kernels appears in the trace" in n for n in result.notes)
    # Every profilable kernel of the trace is listed, with the share summarize_trace gives it (one base for both).
    top = result.unprofiled[0]
    assert bare_function(top.name) == "flash_fwd_kernel" and (top.instances, top.launches) == (1, 68)
    assert top.share_pct == pytest.approx(summary.top_kernels[0].share_pct, abs=0.01) and top.share_pct > 50
    assert top.ncu_command == ("ncu --set full -k regex:'^(flash_fwd_kernel)$' -c 1 -o flash_fwd_kernel "
                               "<the application>")
    elementwise = next(u for u in result.unprofiled if bare_function(u.name) == "elementwise_kernel")
    assert elementwise.instances > 1  # template instances of one function, counted together
    assert not any(u.name.startswith(("Memcpy", "Memset", "ncclDevKernel")) for u in result.unprofiled)
    assert result.decides is not None and result.decides.startswith(
        "ncu --set full -k regex:'^(flash_fwd_kernel|elementwise_kernel|vectorized_elementwise_kernel)$' -c 3 "
        "-o top_kernels")
    assert "flash::flash_fwd_kernel first" in result.conclusion[-1]


async def test_names_spelled_by_two_demanglers_join_one_to_one() -> None:
    # The profiled side as ncu prints it with --print-kernel-base mangled, demangled by c++filt; the trace side as
    # nsys demangled the same kernels. Each joins its own kernel of the trace, not merely one of the same function.
    with sqlite3.connect(f"file:{FUSER}?mode=ro", uri=True) as db:
        pairs = dict(db.execute("SELECT DISTINCT m.value, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds "
                                "m ON m.id = k.mangledName JOIN StringIds d ON d.id = k.demangledName").fetchall())
    demangled = await demangle(pairs, 30)
    ours = {demangled.of(symbol): nvidia for symbol, nvidia in pairs.items()}
    trace = await read_trace_kernels(FUSER, (FUSER.parent,), 60)
    matches, rest = join(list(ours), trace)
    assert set(matches) == set(ours) and rest == []
    by_instance = [name for name, match in matches.items() if match.how.startswith("same function and template")]
    # Eleven instances of vectorized_elementwise_kernel<4, Functor> and reduce_kernel<512, 1, ...>, each its own.
    assert len(by_instance) == 12
    for name in by_instance:
        [kernel] = matches[name].trace_kernels
        assert kernel.name == ours[name]
    assert matches["nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"].how == "same name"


async def test_a_name_cut_short_joins_by_its_beginning() -> None:
    # Names as a markdown table shows them, cut at 80 characters with "..." (analyze_kernels' and summarize_trace's
    # own tables): matched to the trace kernel they begin.
    trace = await read_trace_kernels(FUSER, (FUSER.parent,), 60)
    whole = next(k for k in trace.kernels if bare_function(k.name) == "distribution_elementwise_grid_stride_kernel")
    cut = whole.name[:77] + "..."
    matches, rest = join([cut], trace)
    assert matches[cut].trace_kernels == [whole] and matches[cut].how.startswith("by its beginning")
    assert whole not in rest


def test_through_the_cli_with_a_trace_that_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text('{"traceEvents": "not a list"}')
    (tmp_path / "k.csv").write_bytes((DATA / "kernels" / "files" / "yzwang-cudacode-raw.csv").read_bytes())
    done = run_cli(["analyze-kernels", "k.csv", "--trace", "trace.json", "--root", str(tmp_path), "--json"],
                   base_env())
    assert done.returncode in (0, 1, 2, 4), done.stderr
    result = json.loads(done.stdout)
    assert [c["status"] for c in result["coverage"]] == ["read", "not_understood"]
    assert result["coverage"][1]["detail"].startswith("--trace:")
    assert result["unprofiled"] == [] and result["trace_profiled_pct"] is None
    assert result["kernels"][0]["verdict"] == "compute_bound"
