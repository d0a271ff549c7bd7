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
        filled = int(progress / (total or 100) * 20)
        sys.stderr.write(f"\r\x1b[2K{command}: [{'#' * filled}{'.' * (20 - filled)}] {progress:.0f}% "
                         f"{(message or '')[:80]}")
        sys.stderr.flush()

    return report
