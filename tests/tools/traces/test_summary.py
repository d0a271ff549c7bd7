"""summarize_trace: HTA's own numbers on the shared real traces, the data-loading verdict on a real
num_workers=0 run, hand-built traces with known intervals for every gap kind, and malformed inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import REPO, base_env, run_cli
from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
from tools.traces.summary import SummarizeTraceInput, SummarizeTraceResult, short_name, summarize_trace

SHARED = REPO.parent / "shared" / "data" / "traces"
# Produced by the shared-data curators with HTA itself: pip install holistictraceanalysis==0.5.0;
# TraceAnalysis(trace_dir=...).get_temporal_breakdown(visualize=False) on each file (see "what" inside).
HTA = json.loads((SHARED / "hta_reference.json").read_text())


def summarize(path: Path | str, root: Path, **args: Any) -> SummarizeTraceResult:
    context = ToolContext(roots=(root.resolve(),))  # roots are resolved, as the server's settings do
    return anyio.run(summarize_trace, SummarizeTraceInput(path=str(path), **args), context)


HTA_CASES = [(name, rank, file) for name, s in HTA["sets"].items() for rank, file in s["files"].items()
             if s.get("temporal_breakdown")]


@pytest.mark.parametrize(("name", "rank", "file"), HTA_CASES, ids=[f"{c[0]}-r{c[1]}" for c in HTA_CASES])
def test_temporal_breakdown_matches_hta(name: str, rank: str, file: str) -> None:
    expected = {r["rank"]: r for r in HTA["sets"][name]["temporal_breakdown"]}
    hta = expected.get(int(rank)) or next(iter(expected.values()))
    ours = summarize(file, SHARED).ranks[0]
    assert abs(ours.idle_pct - hta["idle_time_pctg"]) <= 1.0  # type: ignore[operator]
    assert abs(ours.compute_pct - hta["compute_time_pctg"]) <= 1.0  # type: ignore[operator]
    assert abs(ours.non_compute_pct - hta["non_compute_time_pctg"]) <= 1.0  # type: ignore[operator]


def test_real_num_workers_0_run_is_data_loading_bound_and_4_workers_is_not() -> None:
    slow = summarize("kineto/resnet50_num_workers_0", SHARED)
    fast = summarize("kineto/resnet50_num_workers_4", SHARED)
    assert slow.causes[0].kind == "data_loading" and slow.causes[0].share_pct > 30
    assert "DataLoader.__next__" in slow.causes[0].evidence
    assert slow.ranks[0].steps == 5 and 170 < (slow.ranks[0].step_time_ms or 0) < 182
    loading = [c for c in fast.causes if c.kind == "data_loading"]
    assert not loading or loading[0].share_pct < 5
    assert (fast.ranks[0].step_time_ms or 0) < (slow.ranks[0].step_time_ms or 0)


def test_two_real_ranks_in_a_folder() -> None:
    result = summarize("hta/trace_filter", SHARED)
    assert [r.rank for r in result.ranks] == [0, 1]
    assert all(r.comm_pct is not None and r.comm_pct > 0 for r in result.ranks)
    # Every kernel, memcpy and memset of both files is counted once (an independent count with json).
    device_ops = 0
    for name in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        events = json.loads(gzip.decompress((SHARED / "hta" / "trace_filter" / name).read_bytes()))["traceEvents"]
        device_ops += sum(1 for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert sum(result.kernel_histogram.values()) == device_ops == 2358


# ---- hand-built traces: known intervals in, known shares out -----------------------------------------


def _x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> list[dict[str, Any]]:
    launch = _x("cuda_runtime", "cudaLaunchKernel", ts - 5, 4, correlation=corr)
    return [launch, _x("kernel", name, ts, dur, pid=0, tid=stream, stream=stream, correlation=corr, device=0)]


def _steps(*spans: tuple[float, float]) -> list[dict[str, Any]]:
    return [_x("user_annotation", f"ProfilerStep#{i}", s, e - s) for i, (s, e) in enumerate(spans)]


def _write(path: Path, events: list[dict[str, Any]], **meta: Any) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, **meta, "traceEvents": events}))
    return path


def test_data_loading_share_is_exact(tmp_path: Path) -> None:
    # Two analysed steps of 1000 us (a third is left out as HTA does). In each, the GPU waits 400 us while
    # DataLoader.__next__ runs, then computes 600 us.
    events = _steps((0, 1000), (1000, 2000), (2000, 3000))
    for base, corr in ((0, 1), (1000, 2), (2000, 3)):
        events.append(_x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base, 400))
        events += _kernel("gemm_kernel", base + 400, 600, corr)
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    rank = result.ranks[0]
    assert (rank.steps, rank.step_time_ms, rank.gpu_busy_pct, rank.data_wait_pct) == (2, 1.0, 60.0, 40.0)
    assert [(c.kind, c.share_pct) for c in result.causes] == [("data_loading", 40.0)]
    assert result.conclusion[1].startswith("Main cause: data_loading at 40.0% of step time")


def test_implicit_sync_names_the_op(tmp_path: Path) -> None:
    # Kernel 0-300; then aten::item -> cudaStreamSynchronize waits 300-700 with the GPU idle; kernel 700-1000.
    events = _steps((0, 1000), (1000, 1100))
    events += _kernel("reduce_kernel", 0, 300, 1) + _kernel("gemm_kernel", 700, 300, 2)
    events.append(_x("cpu_op", "aten::item", 290, 420, tid=1))
    events.append(_x("cpu_op", "aten::_local_scalar_dense", 295, 410, tid=1))
    events.append(_x("cuda_runtime", "cudaStreamSynchronize", 300, 400, tid=1, correlation=99))
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    cause = next(c for c in result.causes if c.kind == "implicit_sync")
    assert cause.share_pct == 40.0
    assert "cudaStreamSynchronize x1" in cause.evidence and "aten::_local_scalar_dense x1" in cause.evidence


def test_exposed_comm_and_launch_bound(tmp_path: Path) -> None:
    # Step 0-1000: compute 0-400 on stream 7; NCCL 200-700 on stream 20 (300 us exposed: 400-700);
    # then 100 kernels of 2 us with 1 us gaps from 700 (launch-bound: 100 us of small gaps, the last one
    # before the step ends at 1000).
    events = _steps((0, 1000), (1000, 1001))
    events += _kernel("gemm_kernel", 0, 400, 1)
    events += _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 200, 500, 2,
                      stream=20)
    corr = 10
    for i in range(100):
        events += _kernel("elementwise_kernel", 700 + 3 * i, 2, corr)
        corr += 1
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    shares = {c.kind: c.share_pct for c in result.causes}
    assert shares["exposed_comm"] == 30.0
    assert shares["launch_bound"] == 10.0
    rank = result.ranks[0]
    assert (rank.comm_pct, rank.exposed_comm_pct, rank.comm_overlap_pct) == (50.0, 30.0, 40.0)


def test_overhead_bound_eager_loop_is_launch_bound_from_the_host_side(tmp_path: Path) -> None:
    # Eager small-batch inference: a 5 us kernel every 50 us, each launched 5 us before it starts, i.e. after the
    # GPU ran dry (45 us gaps, too long for the short-gap rule). Two analysed steps of 1000 us: 90 % idle, all of
    # it waiting for the host to dispatch the next op.
    events = _steps((0, 1000), (1000, 2000), (2000, 2100))
    for k in range(42):
        events += _kernel("void at::native::vectorized_elementwise_kernel<4>", 50 * k, 5, 100 + k)
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    assert result.ranks[0].gpu_busy_pct == 10.0
    assert [(c.kind, c.share_pct) for c in result.causes] == [("launch_bound", 90.0)]
    evidence = result.causes[0].evidence
    assert "CPU overhead" in evidence and "40 gaps" in evidence and "median gap 45.0 us" in evidence
    assert "median kernel 5.0 us" in evidence and "5.0 us after its launch call" in evidence


@pytest.mark.parametrize("linked", [True, False])
def test_busy_cuda_graph_replay_is_neither_idle_nor_launch_bound(tmp_path: Path, linked: bool) -> None:
    # One cudaGraphLaunch before the steps replays 200 kernels of 9 us, 1 us apart: the GPU is 90 % busy and the
    # gaps are the graph's own, not the host's, whether the kernels carry the launch's correlation or none.
    events = _steps((0, 1000), (1000, 2000), (2000, 2100))
    events.append(_x("cuda_runtime", "cudaGraphLaunch", -30, 10, correlation=1))
    for k in range(201):
        args = {"stream": 7, "device": 0, **({"correlation": 1} if linked else {})}
        events.append(_x("kernel", "void gemv_kernel<256>", 10 * k, 9, pid=0, tid=7, **args))
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    assert result.ranks[0].gpu_busy_pct == 90.0
    assert [(c.kind, c.share_pct) for c in result.causes] == [("gpu_wait", 10.0)]


def test_host_preprocessing_without_a_dataloader_is_input_preprocessing(tmp_path: Path) -> None:
    # Each step: 600 us of host image resizing (a CPU op that launches nothing, no DataLoader span), then the
    # model's kernel 600-1000 launched at 595.
    events = _steps((0, 1000), (1000, 2000), (2000, 3000))
    for base, corr in ((0, 1), (1000, 2), (2000, 3)):
        events.append(_x("cpu_op", "aten::upsample_bilinear2d", base + 10, 580))
        events += _kernel("void cutlass_gemm_kernel", base + 600, 400, corr)
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    assert result.ranks[0].gpu_busy_pct == 40.0
    assert [(c.kind, c.share_pct) for c in result.causes] == [("input_preprocessing", 60.0)]
    evidence = result.causes[0].evidence
    assert "start of 2 step(s)" in evidence and "no DataLoader marker" in evidence
    assert "aten::upsample_bilinear2d 1.2 ms" in evidence


def test_communication_kernels_under_their_newer_names(tmp_path: Path) -> None:
    # 100 us each of NCCL's 2.19+ kernel name, torch's symmetric-memory all-reduce, DeepEP's dispatch, vLLM's custom
    # all-reduce, an NVSHMEM kernel, an MSCCL++ one and DeepSeek's dpsk::ep dispatch, back to back with nothing
    # beside them; then compute.
    names = ["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16*, "
             "unsigned long, unsigned long, unsigned long, unsigned long)",
             "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*)",
             "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
             "vllm::Signal*, __nv_bfloat16*, int, int)",
             "void nvshmemi_transfer_rma_nbi_kernel<int>(void*, void const*, unsigned long, int)",
             "void mscclpp::allreduce_kernel<float>(float*, float*, int)",
             "void dpsk::ep::internode::dispatch<8, 128>(int4*, float*, int*, int const*)"]
    events = _steps((0, 1000), (1000, 1001))
    for k, name in enumerate(names):
        events += _kernel(name, 100 * k, 100, 10 + k, stream=20)
    events += _kernel("void cutlass_gemm_kernel", 700, 300, 1)
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    rank = result.ranks[0]
    assert (rank.comm_pct, rank.exposed_comm_pct, rank.gpu_busy_pct) == (70.0, 70.0, 100.0)
    assert {k.name: k.kind for k in result.top_kernels if k.name != "cutlass_gemm_kernel"} == {
        short_name(n): "comm" for n in names}


def test_iterations_from_dataloader_calls_when_there_is_no_profiler_step(tmp_path: Path) -> None:
    # The 2021 autograd-profiler form: no ProfilerStep, categories "Operator"/"Runtime"/"Kernel". A 5000 us
    # warm-up iteration, then three of 1000 us, each 400 us of DataLoader with the GPU idle, then 600 us of
    # kernel. Iterations run from one DataLoader call to the next; the first (warm-up) is left out.
    events: list[dict[str, Any]] = []
    starts = [0, 5000, 6000, 7000, 8000]
    for corr, base in enumerate(starts):
        events.append(_x("Operator", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", base, 400))
        events.append(_x("Runtime", "cudaLaunchKernel", base + 400, 4, correlation=corr))
        events.append(_x("Kernel", "volta_sgemm_128x64_nn", base + 405, 4000 if corr == 0 else 595, pid=0,
                         tid="stream 7", stream=7, correlation=corr, device=0))
    rank = summarize(_write(tmp_path / "t.json", events).name, tmp_path).ranks[0]
    assert rank.window == "DataLoader iterations 3 of 4 (no ProfilerStep; the first, with the warm-up, left out)"
    assert (rank.steps, rank.step_time_ms, rank.data_wait_pct) == (3, 1.0, 40.0)


H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9}]


def test_achieved_tflops_and_mfu_from_the_profilers_flop_counts(tmp_path: Path) -> None:
    # with_flops=True: two bf16 matmuls of 494.7e9 FLOPs each in an analysed window of 1000 us is 989.4 TFLOP/s,
    # the H100 SXM's dense bf16 peak: 100 % MFU. The left-out last step's matmul does not count.
    events = _steps((0, 500), (500, 1000), (1000, 1500))
    for base, corr in ((0, 1), (500, 2), (1000, 3)):
        events.append(_x("cpu_op", "aten::mm", base + 10, 20, flops=494.7e9, **{
            "Input Dims": [[8192, 8192], [8192, 8192]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}))
        events += _kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", base + 40, 450, corr)
    rank = summarize(_write(tmp_path / "t.json", events, deviceProperties=H100).name, tmp_path).ranks[0]
    assert (rank.achieved_tflops, rank.mfu_pct, rank.precision, rank.peak_tflops) == (989.4, 100.0, "bf16", 989.4)
    assert (rank.flops_from, rank.device) == ("with_flops", "H100/H200 SXM")


def test_achieved_tflops_from_matmul_shapes_and_kernel_names(tmp_path: Path) -> None:
    # record_shapes only: addmm (bias first) 2*4096*1024*2048 and bmm 2*8*512*64*512 FLOPs in a 1000 us step;
    # no input types recorded, so the precision comes from the GEMM kernel's name (fp16, 'h884gemm').
    events = _steps((0, 1000), (1000, 1001))
    events.append(_x("cpu_op", "aten::addmm", 5, 10, **{"Input Dims": [[2048], [4096, 1024], [1024, 2048]]}))
    events.append(_x("cpu_op", "aten::bmm", 20, 10, **{"Input Dims": [[8, 512, 64], [8, 64, 512]]}))
    events.append(_x("cpu_op", "aten::linear", 4, 12, **{"Input Dims": [[4096, 1024], [2048, 1024], [2048]]}))
    events += _kernel("volta_h884gemm_128x128_ldg8_nn", 40, 900, 1)
    props = [{"id": 0, "name": "Tesla V100-SXM2-32GB"}]
    rank = summarize(_write(tmp_path / "t.json", events, deviceProperties=props).name, tmp_path).ranks[0]
    flops = 2 * 4096 * 1024 * 2048 + 2 * 8 * 512 * 64 * 512
    assert rank.achieved_tflops == round(flops / 1e-3 / 1e12, 3)
    assert (rank.precision, rank.peak_tflops, rank.device) == ("fp16", 125.0, "V100 SXM2")
    assert rank.mfu_pct == round(100 * rank.achieved_tflops / 125, 2)
    assert rank.flops_from == "record_shapes (matmuls only)"


def test_convolutions_without_flop_counts_give_no_mfu(tmp_path: Path) -> None:
    events = _steps((0, 1000), (1000, 1001))
    events.append(_x("cpu_op", "aten::conv2d", 5, 10, **{"Input Dims": [[32, 3, 224, 224], [64, 3, 7, 7]]}))
    events.append(_x("cpu_op", "aten::addmm", 20, 10, **{"Input Dims": [[1000], [32, 2048], [2048, 1000]]}))
    events += _kernel("void cudnn::cnn::conv2d_grouped_direct_kernel", 40, 900, 1)
    result = summarize(_write(tmp_path / "t.json", events, deviceProperties=H100).name, tmp_path)
    assert result.ranks[0].mfu_pct is None and result.ranks[0].achieved_tflops == 0.131
    assert any("1 convolutions ran, whose FLOPs only with_flops=True records" in n for n in result.notes)


def test_straggler_across_ranks(tmp_path: Path) -> None:
    # Ranks 0 and 1 wait 600 us in the all-reduce for rank 2, which arrives late and waits 100 us.
    for rank, wait in ((0, 600), (1, 600), (2, 100)):
        events = _steps((0, 1000), (1000, 1001))
        events += _kernel("gemm_kernel", 0, 1000 - wait, 1)
        events += _kernel("ncclDevKernel_AllReduce", 1000 - wait, wait, 2, stream=20)
        _write(tmp_path / f"rank{rank}.json", events, distributedInfo={"rank": rank, "world_size": 3})
    result = summarize(".", tmp_path)
    straggler = next(c for c in result.causes if c.kind == "straggler")
    assert straggler.rank == 2 and straggler.share_pct == 50.0
    assert "rank 2 spends 10.0% of step time in collectives, the others 60.0%" in straggler.evidence


def test_no_profiler_step_cpu_only_legacy_and_bare_array(tmp_path: Path) -> None:
    # Legacy 2021 spellings (Kernel, Runtime, "stream 7" tid), no ProfilerStep, the bare-array form.
    legacy = [
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": "1", "ts": 0, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "Kernel", "name": "volta_sgemm", "pid": 0, "tid": "stream 7", "ts": 10, "dur": 40,
         "args": {"stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "Kernel", "name": "volta_sgemm", "pid": 0, "tid": "stream 7", "ts": 90, "dur": 10,
         "args": {"stream": 7, "correlation": 2}},
    ]
    (tmp_path / "legacy.json").write_text(json.dumps(legacy))
    result = summarize("legacy.json", tmp_path)
    rank = result.ranks[0]
    assert rank.window == "first to last GPU activity (no ProfilerStep)" and rank.gpu_busy_pct == 55.56
    assert any("no ProfilerStep" in n for n in result.notes)
    cpu_only = _steps((0, 1000), (1000, 2000), (2000, 3000)) + [
        _x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 250),
        _x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 1000, 250)]
    result = summarize(_write(tmp_path / "cpu.json", cpu_only).name, tmp_path)
    assert result.ranks[0].gpu_busy_pct is None and result.ranks[0].data_wait_pct == 25.0
    assert any("CPU-only" in n for n in result.notes)


def test_metadata_with_secrets_is_never_echoed(tmp_path: Path) -> None:
    secret = "hf_" + "S" * 30
    events = _steps((0, 100), (100, 200)) + _kernel("gemm_kernel", 0, 50, 1)
    _write(tmp_path / "t.json", events, env={"HF_TOKEN": secret, "PATH": "/usr/bin"}, trace_id=secret)
    done = run_cli(["summarize-trace", "t.json", "--json", "--root", str(tmp_path)], base_env())
    plain = run_cli(["summarize-trace", "t.json", "--root", str(tmp_path)], base_env())
    assert done.returncode in (0, 1) and secret not in done.stdout + plain.stdout and "HF_TOKEN" not in done.stdout


@pytest.mark.parametrize(("content", "message"), [
    (b"", "is empty"),
    (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1', "truncated"),
    (b'{"schemaVersion": 1, "deviceProperties": []}', "has no traceEvents"),
    (b'{"traceEvents": 5}', "traceEvents is not a list"),
    (b"\x1f\x8b\x08\x00garbage-not-gzip", "read failed"),
    (b"hello world", "expected a JSON object or array"),
])
def test_malformed_traces_are_clear_errors(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "bad.json").write_bytes(content)
    done = run_cli(["summarize-trace", "bad.json", "--root", str(tmp_path), "--timeout", "20"], base_env())
    assert done.returncode == 3, done.stdout
    assert message in done.stderr and "Traceback" not in done.stderr


def test_wrong_types_in_fields_are_skipped_not_fatal(tmp_path: Path) -> None:
    events = _steps((0, 100), (100, 200)) + _kernel("gemm_kernel", 0, 50, 1) + [
        {"ph": "X", "cat": "kernel", "name": 5, "ts": "soon", "dur": None, "args": "x"},
        {"ph": "X", "cat": 7, "name": "k", "ts": 1, "dur": 1, "args": {"stream": "seven"}},
        "not an event", 42,
    ]
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    result = summarize("t.json.gz", tmp_path)
    assert result.ranks[0].gpu_events == 1 and result.ranks[0].gpu_busy_pct == 50.0


def _per_step_rows_events() -> list[dict[str, Any]]:
    events = _steps((0, 1000), (1000, 3000), (3000, 3500))
    events.append(_x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1000, 1000))
    return events + _kernel("gemm_kernel", 0, 1000, 1) + _kernel("gemm_kernel", 2000, 1000, 2)


def test_per_step_rows(tmp_path: Path) -> None:
    result = summarize(_write(tmp_path / "t.json", _per_step_rows_events()).name, tmp_path)
    assert [(p.step, p.step_time_ms, p.gpu_busy_pct, p.data_wait_pct) for p in result.steps] == [
        (0, 1.0, 100.0, 0.0), (1, 2.0, 50.0, 50.0)]


def test_profiler_steps_drawn_on_the_gpu_timeline_are_not_steps(tmp_path: Path) -> None:
    # Newer Kineto and ROCm traces repeat each ProfilerStep#N as a gpu_user_annotation spanning the step's GPU
    # work (with a stream arg). Counted as steps, they made three of two and cut the window at the GPU copy's end.
    events = _per_step_rows_events()
    for i, (s, e) in enumerate(((0, 1000), (2000, 3000))):
        events.append(_x("gpu_user_annotation", f"ProfilerStep#{i}", s, e - s, pid=0, tid=7, stream=7, device=0))
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    assert (result.ranks[0].steps, result.ranks[0].window) == (2, "ProfilerSteps 2 of 3 (last left out, as HTA)")
    assert [(p.step, p.step_time_ms, p.gpu_busy_pct, p.data_wait_pct) for p in result.steps] == [
        (0, 1.0, 100.0, 0.0), (1, 2.0, 50.0, 50.0)]
    assert sum(result.kernel_histogram.values()) == 2  # the annotations are not GPU work either


def test_cpu_ops_during_gpu_idle(tmp_path: Path) -> None:
    # GPU idle 500-1000 while a 400 us aten::index_select (and its 1000 us parent) runs on the CPU.
    events = _steps((0, 1000), (1000, 1001)) + _kernel("gemm_kernel", 0, 500, 1)
    events.append(_x("cpu_op", "## forward ##", 0, 1000))
    events.append(_x("cpu_op", "aten::index_select", 550, 400))
    events.append(_x("cpu_op", "aten::add", 600, 20))  # short: not kept
    result = summarize(_write(tmp_path / "t.json", events).name, tmp_path)
    assert [(o.name, o.idle_overlap_ms, o.calls) for o in result.idle_cpu_ops] == [
        ("## forward ##", 0.5, 1), ("aten::index_select", 0.4, 1)]


def test_many_ranks_show_outliers_and_a_distribution(tmp_path: Path) -> None:
    # 40 ranks; rank 17 is slow (step 1500 us instead of 1000 us).
    for rank in range(40):
        step = 1500 if rank == 17 else 1000
        events = _steps((0, step), (step, step + 1)) + _kernel("gemm_kernel", 0, 500, 1)
        events += [_x("cuda_runtime", "cudaMemcpyAsync", 550, 4, correlation=2),
                   _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 560, 100, pid=0, tid=7, stream=7,
                      correlation=2)]
        _write(tmp_path / f"rank{rank}.json", events, distributedInfo={"rank": rank, "world_size": 40})
    result = summarize(".", tmp_path)
    assert 17 in [r.rank for r in result.ranks] and len(result.ranks) <= 16
    assert result.notes[0].startswith("40 ranks (table shows the outliers): step time min/median/max "
                                      "1.0 / 1.0 / 1.5 ms")
    assert next(r for r in result.ranks if r.rank == 0).memory_pct == 10.0
    assert "slowest rank 17 (1.5 ms)" in result.conclusion[0]


def test_a_symlink_in_the_folder_does_not_lead_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "job").mkdir(parents=True)
    events = _steps((0, 100), (100, 200)) + _kernel("gemm_kernel", 0, 50, 1)
    _write(root / "job" / "rank0.json", events)
    _write(tmp_path / "elsewhere.json", events)
    (root / "job" / "rank1.json").symlink_to(tmp_path / "elsewhere.json")
    result = summarize("job", root)
    assert [r.file for r in result.ranks] == ["job/rank0.json"]


def test_a_trace_that_ends_early_is_summarised_as_far_as_it_goes(tmp_path: Path) -> None:
    """A real trace cut as a copy of a file still being written is: inside an event, between two events, and at the
    end of the event list. The complete events are summarised and the cut is said; a file cut before its events
    is still refused."""
    source = next((REPO / "tests" / "data" / "traces" / "resnet50_num_workers_0").glob("*.json.gz"))
    text = gzip.decompress(source.read_bytes())
    whole = anyio.run(summarize_trace, SummarizeTraceInput(path=str(source)), ToolContext(roots=(REPO,)))
    events_end = text.rindex(b"]")
    between = text.rindex(b"},", 0, int(len(text) * 0.97)) + 2
    for name, end in (("inside", int(len(text) * 0.97)), ("between", between), ("list_end", events_end)):
        (tmp_path / f"{name}.json").write_bytes(text[:end])
        result = anyio.run(summarize_trace, SummarizeTraceInput(path=f"{name}.json"), ToolContext(roots=(tmp_path,)))
        assert result.notes[0].startswith(f"rank 0: {name}.json ends early, at character "), (name, result.notes)
        assert "so only ProfilerSteps" in result.notes[0] and "are judged" in result.notes[0]
        assert result.ranks[0].steps >= 1 and result.ranks[0].steps <= whole.ranks[0].steps, name
        assert [(c.input, c.status) for c in result.coverage] == [(f"{name}.json", "partial")]
        assert result.coverage[0].detail.startswith("ends early, at character ")
    (tmp_path / "head.json").write_bytes(text[:200])  # inside the metadata, before any event
    with pytest.raises(UnreadableInput, match="ends inside a value|truncated"):
        anyio.run(summarize_trace, SummarizeTraceInput(path="head.json"), ToolContext(roots=(tmp_path,)))


@pytest.mark.parametrize("value", ["1" + "0" * 400, "1e400", "-1e400", "NaN", "Infinity"])
def test_a_time_no_clock_gives_is_a_counted_skip(tmp_path: Path, value: str) -> None:
    # A real trace (tests/data/traces/wild: HTA's MI250 mini toy) with one kernel's ts made huge or non-finite, as
    # a corrupt or mutated file has it: that event is skipped and counted, never an internal error.
    real = REPO / "tests" / "data" / "traces" / "wild" / "files" / "t4-hta-mi250-minitoy.json.gz"
    trace = json.loads(gzip.decompress(real.read_bytes()))
    kernel = next(e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel")
    kernel["ts"] = "@@TS@@"
    (tmp_path / "trace.json").write_text(json.dumps(trace).replace('"@@TS@@"', value))
    result = summarize("trace.json", tmp_path)
    assert result.coverage[0].status == "partial" and "1 of" in result.coverage[0].detail
    assert result.ranks and result.top_kernels  # the rest of the trace is read as before
