"""Startup cost of the server: a stdio `initialize` + `tools/list` round trip, measured side by side with a
bare MCPServer that has one trivial tool (the floor set by the SDK's own import and handshake).

Prints each run, the medians and the ratio. Target (issue 21): ours <= 1.1 x the bare server.
Usage: .venv/bin/python benchmarks/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]
BARE_SERVER = '''
from mcp.server import MCPServer

server = MCPServer(name="bare", version="0")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


server.run()
'''


async def round_trip(args: list[str]) -> tuple[float, int]:
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO),
                                   env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    started = time.perf_counter()
    with open("/dev/null", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = (await client.list_tools()).tools
            elapsed = time.perf_counter() - started
    return elapsed, len(tools)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_server.py"
        bare.write_text(BARE_SERVER)
        ours_s: list[float] = []
        bare_s: list[float] = []
        anyio.run(round_trip, [str(bare)])  # warm the OS file cache for both before measuring
        anyio.run(round_trip, ["-m", "mcp_server"])
        for run in range(runs):
            # Interleaved, so drift on a noisy machine hits both alike.
            b, _ = anyio.run(round_trip, [str(bare)])
            o, count = anyio.run(round_trip, ["-m", "mcp_server"])
            bare_s.append(b)
            ours_s.append(o)
            print(f"run {run + 1}: bare {b * 1000:.0f} ms, gpu-triage-mcp {o * 1000:.0f} ms ({count} tools)")
    bare_median, ours_median = statistics.median(bare_s), statistics.median(ours_s)
    ratio = ours_median / bare_median
    print(f"median: bare MCPServer + 1 tool {bare_median * 1000:.0f} ms; gpu-triage-mcp {ours_median * 1000:.0f} ms")
    print(f"ratio: {ratio:.2f}x (target <= 1.10x) -> {'OK' if ratio <= 1.1 else 'OVER'}")


if __name__ == "__main__":
    main()
