"""What a tool call may use besides its input: the allowed roots and its remaining time."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.core.limits import DEFAULT_CALL_TIMEOUT_S
from tools.core.paths import confine
from tools.core.progress import Progress

__all__ = ["ToolContext"]


@dataclass(frozen=True)
class ToolContext:
    roots: tuple[Path, ...]
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    # Multi-node calls: what runs our collector on the nodes (operator settings, not tool arguments).
    remote_python: str = sys.executable
    ssh_config: Path | None = None
    started: float = field(default_factory=time.monotonic)
    progress: Progress = field(default_factory=Progress)  # how far the call has got (tools/core/progress.py)

    def path(self, raw: str, *, must_exist: bool = True) -> Path:
        """`raw` resolved inside the roots, or BadInput."""
        return confine(raw, self.roots, must_exist=must_exist)

    def remaining_s(self) -> float:
        """Seconds left of the call's wall-clock limit (for child-process timeouts)."""
        return max(0.1, self.timeout_s - (time.monotonic() - self.started))
