"""telemetry_history on a fleet: 64 nodes x 8 GPUs x 6 h at 30 s (dcgm-exporter's names and labels) backfilled into
a real Prometheus 2.42 on 127.0.0.1, one GPU throttling, one XID, one held idle; the call must answer within 5 s with
bounded memory. Prints the call's time, its queries, the points it read and the peak memory it added. Then the same
call with the job's step logs (64 ranks, a line every 10 steps, slower from a minute after the throttling began):
step_change must name the throttled GPU within the same 5 s.

    .venv/bin/python benchmarks/telemetry.py [--nodes 64] [--gpus 8] [--hours 6]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tools.telemetry.history import Gpu, Prometheus, Scenario, write_families  # noqa: E402
from tools.core.context import ToolContext  # noqa: E402
from tools.telemetry import TelemetryHistoryInput, TelemetryHistoryResult, telemetry_history  # noqa: E402

START = 1768010400  # 2026-01-10T02:00:00Z


def fleet(nodes: int, gpus: int) -> list[Gpu]:
    return [Gpu(f"node-{n:03d}", i, f"GPU-{n:04x}{i:04x}-2c1e-1e63-0068-9178c4298abd",
                f"00000000:{0x19 + 0x10 * i:02X}:00.0", hpc_job="4242") for n in range(nodes) for i in range(gpus)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=6.0)
    args = parser.parse_args()
    span = int(args.hours * 3600)
    change = START + span // 2

    def values(gpu: Gpu, concept: str, t: int) -> float | None:
        throttled = (gpu.node, gpu.index) == ("node-007", 3) and t >= change
        idle = (gpu.node, gpu.index) == ("node-021", 5) and t >= change
        return {"sm_clock": 1410 if throttled else 1980, "gpu_util": 0 if idle else 96 + (t // 30 + gpu.index) % 3,
                "gpu_temp": 89 if throttled else 66, "power": 520 if throttled else 690, "fb_used": 61000,
                "clock_reasons": 0x40 if throttled else 0,
                "xid": 48 if (gpu.node, gpu.index) == ("node-042", 1) and t >= change else 0}[concept]

    concepts = ("sm_clock", "gpu_util", "gpu_temp", "power", "fb_used", "clock_reasons", "xid")
    scenario = Scenario(fleet(args.nodes, args.gpus), values, START, START + span, concepts=concepts)
    with tempfile.TemporaryDirectory() as folder:
        built = time.monotonic()
        server = Prometheus(Path(folder), write_families([scenario]))
        print(f"backfilled {args.nodes * args.gpus} GPUs x {span // 30} samples x {len(concepts)} metrics in "
              f"{time.monotonic() - built:.0f} s")
        logs = Path(folder) / "logs"
        logs.mkdir()
        for rank in range(args.nodes):
            _write_step_log(logs / f"rank{rank}.log", START, START + span, change + 60)
        try:
            window = {"url": server.url, "start": str(START), "end": str(START + span)}
            plain = _timed(TelemetryHistoryInput.model_validate(window), Path(folder))
            stepped = _timed(TelemetryHistoryInput.model_validate(
                {**window, "step_logs": [str(logs / "rank*.log")], "step_log_utc_offset": "Z"}), Path(folder))
        finally:
            server.close()
    ok = True
    for (result, seconds, added), expected in ((plain, {"throttled", "held_idle", "xid"}),
                                               (stepped, {"throttled", "held_idle", "xid", "step_change"})):
        print(f"telemetry_history{' with step logs' if result.step_change else ''}: {seconds:.2f} s, "
              f"{result.queries} queries, {result.points_read} points read, peak RSS +{added:.0f} MiB, "
              f"{len(result.gpus)} GPU rows")
        for finding in result.findings:
            print(f"  {finding.kind} {finding.severity.value} {finding.node} GPU {finding.gpu} from {finding.began}")
        ok = ok and seconds <= 5.0 and {f.kind for f in result.findings} == expected
    named = stepped[0].step_change.gpus if stepped[0].step_change else []
    ok = ok and "node-007/3" in named
    print(f"step_change names {named}")
    print("PASS" if ok else "FAIL: over 5 s or the wrong findings")
    return 0 if ok else 1


def _timed(params: TelemetryHistoryInput, root: Path) -> tuple[TelemetryHistoryResult, float, float]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    result = anyio.run(telemetry_history, params, ToolContext(roots=(root,), timeout_s=60))
    seconds = time.monotonic() - started
    return result, seconds, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024


def _write_step_log(path: Path, start: int, end: int, slow_from: int) -> None:
    """One rank's log, a line every 10 steps: 0.8 s steps, 1.2 s from slow_from on (ISO times with Z)."""
    t, step, lines = float(start), 0, []
    while t < end:
        ms = 1200.0 if t >= slow_from else 800.0
        t += 10 * ms / 1000
        step += 10
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
        lines.append(f"{stamp} step={step} step_time_ms={ms:.1f}\n")
    path.write_text("".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
