"""The CLI's progress line: what an MCP client gets as progress notifications, drawn on stderr for a person at a
terminal (nothing when stderr is piped or logged, so scripts and CI see only the answer)."""

from __future__ import annotations

import sys

from mcp_server.contract import Reporter

__all__ = ["terminal_progress"]


def terminal_progress(command: str) -> Reporter | None:
    """A progress line on stderr while a call runs, when stderr is a terminal (nothing when piped or logged)."""
    if not sys.stderr.isatty():
        return None

    async def report(progress: float, total: float | None, message: str | None) -> None:
        if total:
            filled = int(progress / total * 20)
            done = f"[{'#' * filled}{'.' * (20 - filled)}] {100 * progress / total:.0f}%"
        else:  # no measure of the work: how long it has run (the contract sends seconds then)
            done = f"running {progress:.0f} s"
        line = f"{command}: {done} {message or ''}" if message != f"running {progress:.0f} s" else f"{command}: {done}"
        sys.stderr.write(f"\r\x1b[2K{line[:120]}")
        sys.stderr.flush()

    return report
