"""Record real CUDA torch.profiler traces of known bottlenecks, and read them and the real NVML back with our tools.

Run on a CUDA machine (scripts/gpu_check.sh does, in one prepared call of a few minutes; never in CI). Each scenario
is a small loop built to have one bottleneck; its trace is exported, stripped to what a trace needs (traceEvents,
deviceProperties, schemaVersion, displayTimeUnit, distributedInfo's rank/world_size/backend: real traces carry
environment and metadata blocks), and summarised by summarize_trace, whose verdict is printed beside the one the
scenario was built for. health_check and nvidia_smi_query then run on the real NVML / nvidia-smi.

Then GPM (issue 23): each of four loads runs in a thread while gpu_activity samples NVML GPM live and
`nvidia-smi dmon --gpm-metrics` records the same seconds; the loads are built for a verdict each (bf16 GEMMs: none,
their tensor pipes busy; fp32 GEMMs without TF32: no_tensor_cores; tiny kernels: low_sm_activity; a large copy:
memory_bound), so the verdicts, the values for the NVML stand-in and the first real dmon GPM captures come back.

Out (at most 8 files, for the device tool to bring back): traces.tar.gz (the stripped traces), summaries.json,
health.json, smi.json, activity.json, dmon_gpm.txt; gpu_check.log and nvidia-smi.csv are written by the wrapper.

`--cpu` runs every scenario on the CPU at toy sizes: the CI's check that this script still runs (its traces have
no GPU events; nothing is compared).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KEPT = ("traceEvents", "schemaVersion", "deviceProperties", "displayTimeUnit")
STEPS = 8  # profiled: 1 wait, 2 warm-up, 5 active


def _strip(raw: dict[str, Any]) -> dict[str, Any]:
    kept = {k: raw[k] for k in KEPT if k in raw}
    info = raw.get("distributedInfo")
    if isinstance(info, dict):
        kept["distributedInfo"] = {k: info[k] for k in ("rank", "world_size", "backend") if k in info}
    return kept


def _profile(step: Callable[[], None], device: str, folder: Path, name: str) -> Path:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    raw = folder / f"{name}.raw.json"
    with torch.profiler.profile(activities=activities, record_shapes=True, with_flops=True,
                                schedule=torch.profiler.schedule(wait=1, warmup=2, active=5),
                                on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as profiler:
        for i in range(STEPS):
            with torch.profiler.record_function(f"## step {i} ##"):
                step()
            profiler.step()
    if device == "cuda":
        torch.cuda.synchronize()
    stripped = folder / f"{name}.json.gz"
    stripped.write_bytes(gzip.compress(json.dumps(_strip(json.loads(raw.read_text()))).encode(), mtime=0))
    raw.unlink()
    return stripped


# ---- scenarios: each returns a step function built to have one bottleneck ------------------------------------


def loader_num_workers_0(device: str, scale: int) -> Callable[[], None]:
    """Image-like batches decoded on the host in the main process (num_workers=0): data loading."""

    class Images(torch.utils.data.Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, i: int) -> torch.Tensor:
            image = torch.rand(3, 64 * scale, 64 * scale)
            return torch.nn.functional.interpolate(image[None], scale_factor=2.0, mode="bilinear")[0]

    loader = iter(torch.utils.data.DataLoader(Images(), batch_size=16, num_workers=0))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3)).to(device)

    def step() -> None:
        model(next(loader).to(device)).sum().backward()

    return step


def tiny_kernels(device: str, scale: int) -> Callable[[], None]:
    """Thousands of elementwise ops on a small tensor, eager: launch-bound (CPU overhead)."""
    x = torch.rand(256, device=device)

    def step() -> None:
        y = x
        for _ in range(500 * scale):
            y = y * 1.0001 + 0.0001
        y.sum()

    return step


def busy_gemm(device: str, scale: int) -> Callable[[], None]:
    """Large bf16 matmuls back to back: the GPU is busy; with_flops gives achieved TFLOP/s and MFU."""
    n = 1024 * scale
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = torch.rand(n, n, device=device, dtype=dtype), torch.rand(n, n, device=device, dtype=dtype)

    def step() -> None:
        c = a
        for _ in range(20):
            c = torch.mm(c, b) * 1e-3

    return step


def item_per_step(device: str, scale: int) -> Callable[[], None]:
    """A .item() after every few ops, as a loss print per micro-step does: the host waits, then relaunches."""
    x = torch.rand(512 * scale, 512 * scale, device=device)

    def step() -> None:
        y = x
        for _ in range(20):
            y = torch.tanh(y @ x) * 0.5
            float(y.mean().item())

    return step


def cuda_graph_replay(device: str, scale: int) -> Callable[[], None]:
    """The tiny-kernel loop captured once as a CUDA graph and replayed: busy, not launch-bound."""
    x = torch.rand(256, device=device)
    if device != "cuda":
        return tiny_kernels(device, scale)

    def body() -> torch.Tensor:
        y = x
        for _ in range(500 * scale):
            y = y * 1.0001 + 0.0001
        return y

    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()

    def step() -> None:
        for _ in range(20):
            graph.replay()

    return step


def host_preprocessing(device: str, scale: int) -> Callable[[], None]:
    """Each step resizes and normalises its input on the host (no DataLoader) before the model runs."""
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(device)

    def step() -> None:
        raw = torch.rand(8, 3, 256 * scale, 256 * scale)
        small = torch.nn.functional.interpolate(raw, size=(64, 64), mode="bilinear")
        batch = ((small - small.mean()) / small.std()).reshape(8, -1)[:, :4096].contiguous()
        model(batch.to(device)).sum().backward()

    return step


SCENARIOS: dict[str, tuple[Callable[[str, int], Callable[[], None]], str]] = {
    "loader_num_workers_0": (loader_num_workers_0, "data_loading"),
    "tiny_kernels": (tiny_kernels, "launch_bound"),
    "busy_gemm": (busy_gemm, "gpu_busy"),
    "item_per_step": (item_per_step, "implicit_sync or launch_bound"),
    "cuda_graph_replay": (cuda_graph_replay, "gpu_busy"),
    "host_preprocessing": (host_preprocessing, "input_preprocessing"),
}


def _summaries(paths: dict[str, Path]) -> dict[str, Any]:
    import anyio

    from tools.core.context import ToolContext
    from tools.traces import SummarizeTraceInput, summarize_trace

    out: dict[str, Any] = {}
    for name, path in paths.items():
        context = ToolContext(roots=(path.parent.resolve(),), timeout_s=120)
        result = anyio.run(summarize_trace, SummarizeTraceInput(path=path.name), context)
        rank = result.ranks[0]
        busy, ours = rank.gpu_busy_pct, result.bottleneck
        out[name] = {"built_for": SCENARIOS[name][1], "ours": ours, "result": json.loads(result.model_dump_json())}
        print(f"{name:22} built for {SCENARIOS[name][1]:30} ours {ours:20} busy {busy}% "
              f"TFLOP/s {rank.achieved_tflops} MFU {rank.mfu_pct}%", flush=True)
    return out


def _nvml_tools() -> tuple[Any, Any]:
    import anyio

    from tools.core.context import ToolContext
    from tools.gpu import HealthCheckInput, NvidiaSmiQueryInput, health_check, nvidia_smi_query

    context = ToolContext(roots=(Path.cwd().resolve(),), timeout_s=60)
    health = anyio.run(health_check, HealthCheckInput(), context)
    smi = anyio.run(nvidia_smi_query, NvidiaSmiQueryInput(count=3, interval_s=1.0), context)
    return json.loads(health.model_dump_json()), json.loads(smi.model_dump_json())


def _gemm(dtype: torch.dtype) -> Callable[[], None]:
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 stays on the FP32 pipe: the no_tensor_cores load
    a = torch.rand(8192, 8192, device="cuda", dtype=dtype)
    b = torch.rand(8192, 8192, device="cuda", dtype=dtype)

    def step() -> None:
        torch.matmul(a, b)

    return step


def _tiny() -> Callable[[], None]:
    x = torch.rand(256, device="cuda")

    def step() -> None:
        for _ in range(200):
            x.mul_(1.0001)

    return step


def _copy() -> Callable[[], None]:
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def step() -> None:
        dst.copy_(src)

    return step


GPM_LOADS: dict[str, tuple[Callable[[], Callable[[], None]], str]] = {
    "bf16_gemm": (lambda: _gemm(torch.bfloat16), "none"),
    "fp32_gemm_no_tf32": (lambda: _gemm(torch.float32), "no_tensor_cores"),
    "tiny_kernels": (_tiny, "low_sm_activity"),
    "large_copy": (_copy, "memory_bound"),
}
_DMON_GPM = ["nvidia-smi", "dmon", "--gpm-metrics", "1,2,3,5,7,10,11,12,13,20,21,60,61", "-c", "3"]


def _activity(out: Path) -> None:
    """Each GPM load in a thread, sampled live by gpu_activity and by nvidia-smi dmon --gpm-metrics."""
    from tools.gpu.activity import activity_findings, live_activity

    found: dict[str, Any] = {}
    captures: list[str] = []
    for name, (build, built_for) in GPM_LOADS.items():
        step, stop = build(), threading.Event()

        def loop(step: Callable[[], None] = step, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                step()
                torch.cuda.synchronize()

        worker = threading.Thread(target=loop, daemon=True)
        worker.start()
        time.sleep(1.0)
        try:
            dmon = subprocess.run(_DMON_GPM, capture_output=True, text=True, timeout=20)
            captures.append(f"### {name}: {' '.join(_DMON_GPM)} (rc {dmon.returncode})\n{dmon.stdout}{dmon.stderr}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            captures.append(f"### {name}: {exc}\n")
        records = live_activity(0.5, 4, time.monotonic() + 15)
        stop.set()
        worker.join(10)
        kinds: list[str] = sorted({f.kind for f in activity_findings(records[:1])}) or ["none"]
        found[name] = {"built_for": built_for, "ours": kinds,
                       "gpus": [json.loads(r.model_dump_json()) for r in records]}
        gpu0 = records[0] if records else None
        print(f"{name:20} built for {built_for:16} ours {','.join(kinds):30} "
              f"SM active {gpu0.median('sm_active') if gpu0 else None} tensor "
              f"{gpu0.median('tensor_active') if gpu0 else None} DRAM {gpu0.median('dram_active') if gpu0 else None}",
              flush=True)
        torch.cuda.empty_cache()
    (out / "activity.json").write_text(json.dumps(found, indent=1))
    (out / "dmon_gpm.txt").write_text("\n".join(captures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the traces and outputs")
    parser.add_argument("--cpu", action="store_true", help="toy sizes on the CPU: check that the script runs")
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run this on a GPU machine, or pass --cpu to check the script itself.")
    scale = 1 if args.cpu else 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = {}
        for name, (build, _) in SCENARIOS.items():
            started = time.monotonic()
            paths[name] = _profile(build(device, 1 if args.cpu else scale), device, folder, name)
            print(f"recorded {name} in {time.monotonic() - started:.1f} s", flush=True)
        summaries = _summaries(paths)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for path in paths.values():
                archive.add(path, arcname=path.name)
        (args.out / "traces.tar.gz").write_bytes(buffer.getvalue())
    (args.out / "summaries.json").write_text(json.dumps(summaries, indent=1))
    if device == "cuda":
        health, smi = _nvml_tools()
        (args.out / "health.json").write_text(json.dumps(health, indent=1))
        (args.out / "smi.json").write_text(json.dumps(smi, indent=1))
        print("health_check:", health.get("conclusion"), flush=True)
        print("nvidia_smi_query:", smi.get("conclusion"), flush=True)
        _activity(args.out)


if __name__ == "__main__":
    main()
