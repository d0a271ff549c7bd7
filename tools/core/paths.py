"""The only place that turns a caller's path into a file to open: confined to the configured roots.

One check, as the reference filesystem server makes it: the path (relative ones under a root) is resolved, symlinks
and `..` followed, and the result must lie inside a root. Refused besides: empty or over-long paths, NUL bytes and a
leading '-'. A shell's relative paths mean the working directory: the CLI makes them absolute before they get here
(mcp_server/cli.py); over MCP a relative path is relative to the roots, the first that holds it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tools.core.errors import BadInput
from tools.core.limits import MAX_PATH_CHARS
from tools.core.stalls import refuse_if_stalled, touching

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
    bases = [candidate] if candidate.is_absolute() else [root / candidate for root in roots]
    outside: list[tuple[Path, Path]] = []
    for base in bases:
        refuse_if_stalled(base)
        with touching(base):
            try:
                resolved = base.resolve()
            except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
                raise BadInput(f"path {raw!r} cannot be resolved ({exc}): a symlink loop?", hint) from exc
            if not any(resolved.is_relative_to(root) for root in roots):
                outside.append((base, resolved))
                continue
            refuse_if_stalled(resolved)
            if not must_exist or resolved.exists():
                return resolved
    if outside and len(outside) == len(bases):
        base, resolved = outside[0]
        through = " through a symlink" if resolved != Path(os.path.normpath(base.absolute())) else ""
        raise BadInput(f"path {raw!r} resolves{through} to {resolved}, outside the allowed roots "
                       f"({_describe(roots)}).", hint)
    raise BadInput(f"path {raw!r} does not exist under the allowed roots ({_describe(roots)}).", hint)
