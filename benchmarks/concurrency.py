"""Many clients at once over streamable HTTP: 8 clients, 100 mixed calls each, all in flight together against one
server. Each client has its own log file, with a line only it knows, so a result that reached the wrong client
shows. Checked: no cross-talk, no error beyond the refusals the mix asks for, every call answered. Printed: calls,
refusals, unexpected errors, cross-talk, p50/p99 latency per tool, the server's RSS before and after.

Usage: .venv/bin/python benchmarks/concurrency.py [--clients 8] [--calls 100]
tests/mcp_server/test_concurrency.py runs a shorter round of the same (4 clients, 12 calls).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "mcp_server" / "samples"
# Where an answer says whose it is: the client's own log file or its marker line.
_CLIENT_MARK = re.compile(r"\bclient-?(\d+)(?:\.log\b|-marker\b)")
SMI_CSV = REPO / "tests" / "data" / "nvidia_smi" / "query_gpu_a100_3gpu_noheader_units.csv"


@dataclass
class Round:
    calls: int = 0
    refusals: int = 0  # the mix's own bad calls, refused as they must be
    unexpected: list[str] = field(default_factory=list)
    cross_talk: list[str] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def http_server(root: Path) -> AsyncIterator[tuple[str, psutil.Process]]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "mcp_server", "--http", str(port), "--root", str(root)],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the HTTP server did not start") from None
                await anyio.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp", psutil.Process(process.pid)
    finally:
        process.terminate()
        process.wait(10)


def prepare(root: Path, clients: int) -> None:
    """The shared samples, and one log per client holding a line only that client asks for."""
    shutil.copytree(SAMPLES, root / "samples")
    shutil.copy(SMI_CSV, root / "smi.csv")
    for client in range(clients):
        (root / f"client{client}.log").write_text(
            "\n".join(f"step {i} loss 1.{i}" for i in range(2000))
            + f"\nRuntimeError: CUDA error: client-{client}-marker an illegal memory access was encountered\n")


def _mix(client: int, rng: random.Random) -> tuple[str, dict[str, Any], str]:
    """(tool, arguments, what the answer must hold): "refused" for the calls that must be refused."""
    choice = rng.randrange(7)
    if choice == 0:
        return "grep_logs", {"paths": [f"client{client}.log"], "pattern": f"client-{client}-marker"}, \
            f"client-{client}-marker"
    if choice == 1:
        return "diagnose_logs", {"paths": [f"client{client}.log"]}, f"client{client}.log"
    if choice == 2:
        return "triage_plan", {"symptom": f"GPU util is low on node {client}"}, "gpu_utilization_low"
    if choice == 3:
        return "nvidia_smi_query", {"csv_path": "smi.csv", "fields": [
            "timestamp", "name", "pci.bus_id", "driver_version", "pstate", "pcie.link.gen.max",
            "pcie.link.gen.current", "temperature.gpu", "utilization.gpu", "utilization.memory", "memory.total",
            "memory.free", "memory.used"]}, "A100"
    if choice == 4:
        return "dump_stacks", {"from_files": ["samples/stacks"]}, "all_gather"
    if choice == 5:
        return "grep_logs", {"paths": ["../../etc/passwd"], "pattern": "root"}, "refused"
    return "summarize_trace", {"path": "samples/traces"}, "data_loading"


async def _client(url: str, client: int, calls: int, result: Round) -> None:
    from mcp import Client

    rng = random.Random(client)
    async with Client(url) as session:
        for _ in range(calls):
            tool, arguments, expected = _mix(client, rng)
            started = time.monotonic()
            answer = await session.call_tool(tool, arguments)
            result.latency[tool].append(time.monotonic() - started)
            result.calls += 1
            text = getattr(answer.content[0], "text", "") if answer.content else ""
            if expected == "refused":
                if answer.is_error and "outside the allowed roots" in text:
                    result.refusals += 1
                else:
                    result.unexpected.append(f"client {client} {tool}: not refused: {text[:120]}")
                continue
            if answer.is_error:
                result.unexpected.append(f"client {client} {tool}: {text[:160]}")
                continue
            whole = text + str(answer.structured_content)
            if expected not in whole:
                result.unexpected.append(f"client {client} {tool}: {expected!r} missing")
            others = {int(c) for c in _CLIENT_MARK.findall(whole)} - {client}
            if others:
                result.cross_talk.append(f"client {client} {tool} got client {min(others)}'s answer")


async def run_round(clients: int, calls: int) -> Round:
    result = Round()
    with tempfile.TemporaryDirectory(prefix="gpu-triage-concurrency-") as folder:
        root = Path(folder).resolve()
        prepare(root, clients)
        async with http_server(root) as (url, server):
            result.rss_before_mib = server.memory_info().rss / 2**20
            async with anyio.create_task_group() as group:
                for client in range(clients):
                    group.start_soon(_client, url, client, calls, result)
            result.rss_after_mib = server.memory_info().rss / 2**20
    return result


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    started = time.monotonic()
    result = anyio.run(run_round, args.clients, args.calls)
    print(f"{args.clients} clients x {args.calls} calls in {time.monotonic() - started:.1f} s: {result.calls} "
          f"answered, {result.refusals} refusals as asked, {len(result.unexpected)} unexpected errors, "
          f"{len(result.cross_talk)} cross-talk")
    print(f"{'tool':20} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8}")
    every: list[float] = []
    for tool, values in sorted(result.latency.items()):
        every += values
        print(f"{tool:20} {len(values):6} {1000 * statistics.median(values):8.0f} "
              f"{1000 * _percentile(values, 0.99):8.0f}")
    print(f"{'all':20} {len(every):6} {1000 * statistics.median(every):8.0f} {1000 * _percentile(every, 0.99):8.0f}")
    print(f"server RSS {result.rss_before_mib:.0f} -> {result.rss_after_mib:.0f} MiB")
    for line in (result.unexpected + result.cross_talk)[:10]:
        print("  " + line)


if __name__ == "__main__":
    main()
