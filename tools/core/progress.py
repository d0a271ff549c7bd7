"""How far a call has got, as the tool knows it: written by the tool (from any thread: one tuple assignment), read
by the contract's heartbeat, which turns it into MCP progress notifications or the CLI's progress line.

A tool that knows its work says `ctx.progress.update(done, total, "1.2 of 4.0 GB")`; one that does not still gets
a heartbeat on the time it has used of its deadline, so a slow call is never mistaken for a hung one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Progress"]


@dataclass
class Progress:
    state: tuple[float, float | None, str | None] = (0.0, None, None)  # done, total, message

    def update(self, done: float, total: float | None = None, message: str | None = None) -> None:
        self.state = (float(done), None if total is None else float(total), message)
