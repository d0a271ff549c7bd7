"""The only place that turns a caller's path into a file to open: confined to the configured roots.

One check, as the reference filesystem server makes it: the path (relative ones under a root) is resolved, symlinks
and `..` followed, and the result must lie inside a root. Refused besides: empty or over-long paths, NUL bytes and a
leading '-'. A shell's relative paths mean the working directory: the CLI makes them absolute before they get here
(mcp_server/cli.py); over MCP a relative path is relative to the roots. Roots are often different jobs, so a relative
path that exists under more than one root is refused with the candidates named, never taken from the first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tools.core.errors import BadInput
from tools.core.limits import MAX_PATH_CHARS
from tools.core.stalls import refuse_if_stalled, touching

__all__ = ["ambiguous", "confine", "normalise_roots"]


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
    inside: dict[Path, bool] = {}  # resolved -> exists, in the roots' order; two roots reaching one file are one
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
            inside[resolved] = resolved.exists()
    existing = [path for path, exists in inside.items() if exists]
    if len(existing) > 1:
        raise ambiguous(raw, existing)
    if existing or (inside and not must_exist):
        return existing[0] if existing else next(iter(inside))
    if outside and len(outside) == len(bases):
        base, resolved = outside[0]
        through = " through a symlink" if resolved != Path(os.path.normpath(base.absolute())) else ""
        raise BadInput(f"path {raw!r} resolves{through} to {resolved}, outside the allowed roots "
                       f"({_describe(roots)}).", hint)
    raise BadInput(f"path {raw!r} does not exist under the allowed roots ({_describe(roots)}).", hint)


def ambiguous(raw: str, candidates: Sequence[Path], counts: Sequence[int] | None = None) -> BadInput:
    """The refusal of a relative path or glob found under more than one root: the roots are often different jobs
    (a run and a baseline, two nodes' copies), and merging their files would mix ranks of different runs."""
    named = ", ".join(f"{c} ({n} file{'s' if n != 1 else ''})" if counts else str(c)
                      for c, n in zip(candidates, counts or [0] * len(candidates), strict=True))
    return BadInput(f"{raw!r} matches under more than one root: {named}; files of different roots are never merged.",
                    f"Name one of them by its absolute path (e.g. {str(candidates[0])!r}).")
