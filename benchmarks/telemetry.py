"""telemetry_history on a fleet: 64 nodes x 8 GPUs x 6 h at 30 s (dcgm-exporter's names and labels) backfilled into
a real Prometheus 2.42 on 127.0.0.1, one GPU throttling, one XID, one held idle; the call must answer within 5 s with
bounded memory. Prints the call's time, its queries, the points it read and the peak memory it added.

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
from tools.telemetry import TelemetryHistoryInput, telemetry_history  # noqa: E402

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
        try:
            params = TelemetryHistoryInput(url=server.url, start=str(START), end=str(START + span))
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            started = time.monotonic()
            result = anyio.run(telemetry_history, params, ToolContext(roots=(Path(folder),), timeout_s=60))
            seconds = time.monotonic() - started
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        finally:
            server.close()
    print(f"telemetry_history: {seconds:.2f} s, {result.queries} queries, {result.points_read} points read, "
          f"peak RSS +{(peak - before) / 1024:.0f} MiB, {len(result.gpus)} GPU rows")
    for finding in result.findings:
        print(f"  {finding.kind} {finding.severity.value} {finding.node} GPU {finding.gpu} from {finding.began}")
    ok = seconds <= 5.0 and {f.kind for f in result.findings} == {"throttled", "held_idle", "xid"}
    print("PASS" if ok else "FAIL: over 5 s or the wrong findings")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
