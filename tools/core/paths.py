"""The only place that turns a caller's path into a file to open: confined to the configured roots.

Refused: empty or over-long paths, NUL bytes, leading '-', any '..' component, absolute paths
outside every root, and paths whose resolved target (after following symlinks) leaves the roots.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tools.core.errors import BadInput
from tools.core.limits import MAX_PATH_CHARS

__all__ = ["confine", "normalise_roots"]


def normalise_roots(roots: Sequence[str | Path]) -> tuple[Path, ...]:
    """Resolve configured roots; each must be an existing directory."""
    resolved: list[Path] = []
    for raw in roots:
        root = Path(raw).expanduser().resolve()
        if not root.is_dir():
            raise BadInput(f"root {str(raw)!r} is not a directory.", "Pass --root with an existing directory.")
        resolved.append(root)
    if not resolved:
        raise BadInput("no roots configured.", "Pass at least one --root DIR.")
    return tuple(resolved)


def _describe(roots: Sequence[Path]) -> str:
    return ", ".join(str(r) for r in roots)


def confine(raw: str, roots: Sequence[Path], *, must_exist: bool = True) -> Path:
    """Return the resolved path for `raw` if it lies inside one of `roots`, else raise BadInput."""
    hint = f"Use a path inside the server's roots ({_describe(roots)}), or restart it with --root."
    if not raw or len(raw) > MAX_PATH_CHARS:
        raise BadInput(f"path must be 1 to {MAX_PATH_CHARS} characters.", hint)
    if "\x00" in raw:
        raise BadInput("path contains a NUL byte.", hint)
    if raw.startswith("-"):
        raise BadInput(f"path {raw!r} starts with '-'.", "Prefix it with './' if that is really its name.")
    candidate = Path(raw).expanduser()
    if ".." in candidate.parts:
        raise BadInput(f"path {raw!r} contains '..'; parent references are not followed.", hint)
    bases = [candidate] if candidate.is_absolute() else [root / candidate for root in roots]
    for base in bases:
        resolved = base.resolve()
        inside = any(resolved.is_relative_to(root) for root in roots)
        if not inside:
            if base.is_symlink() or resolved != base.absolute():
                raise BadInput(f"path {raw!r} leads outside the allowed roots (through a symlink).", hint)
            raise BadInput(f"path {raw!r} is outside the allowed roots.", hint)
        if not must_exist or resolved.exists():
            return resolved
    raise BadInput(f"path {raw!r} does not exist under the allowed roots.", hint)
