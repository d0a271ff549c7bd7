"""Mangled kernel names (`_Z...`, what ncu prints with --print-kernel-base mangled and Kineto writes for some
libraries' kernels) demangled by GNU c++filt from binutils, when it is on PATH: run as a program through the
project's one seam (tools/core/proc.py), the names as its arguments in bounded batches, each run with a time limit.
Without c++filt the names stay as they are, and the caller says so in its coverage: a demangler of our own is out of
scope.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tools.core.errors import LimitExceeded, Unavailable
from tools.core.kernel_names import is_mangled
from tools.core.limits import KERNELS_DEMANGLE_BATCH_BYTES, KERNELS_DEMANGLE_MAX_NAMES, KERNELS_DEMANGLE_TIMEOUT_S
from tools.core.proc import find_program, run_program

__all__ = ["Demangled", "demangle"]


@dataclass
class Demangled:
    """Each mangled name that c++filt demangled, and why the others (if any) were kept as they are."""

    names: dict[str, str] = field(default_factory=dict)
    kept: int = 0  # mangled names left as they are
    why_kept: str | None = None

    def of(self, name: str) -> str:
        return self.names.get(name, name)


def _batches(names: list[str]) -> Iterable[list[str]]:
    batch: list[str] = []
    size = 0
    for name in names:
        if batch and size + len(name) + 1 > KERNELS_DEMANGLE_BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(name)
        size += len(name) + 1
    if batch:
        yield batch


async def demangle(names: Iterable[str], timeout_s: float) -> Demangled:
    """The mangled ones among `names`, demangled; within `timeout_s` in all."""
    mangled = sorted({name for name in names if is_mangled(name)})
    found = Demangled()
    if not mangled:
        return found
    if len(mangled) > KERNELS_DEMANGLE_MAX_NAMES:
        found.kept, found.why_kept = len(mangled) - KERNELS_DEMANGLE_MAX_NAMES, (
            f"only the first {KERNELS_DEMANGLE_MAX_NAMES} distinct mangled names are demangled")
        mangled = mangled[:KERNELS_DEMANGLE_MAX_NAMES]
    try:
        find_program("c++filt")
    except Unavailable:
        found.kept += len(mangled)
        found.why_kept = "no c++filt (GNU binutils) on PATH to demangle them"
        return found
    limit = max(1.0, min(timeout_s, KERNELS_DEMANGLE_TIMEOUT_S))
    for batch in _batches(mangled):
        try:
            done = await run_program("c++filt", batch, timeout_s=limit)
        except (Unavailable, LimitExceeded) as exc:
            found.kept += len(batch)
            found.why_kept = f"c++filt failed ({exc})"
            continue
        lines = done.stdout.decode("utf-8", "replace").splitlines()
        if done.returncode != 0 or len(lines) != len(batch):
            found.kept += len(batch)
            found.why_kept = f"c++filt answered {len(lines)} line(s) for {len(batch)} name(s), rc {done.returncode}"
            continue
        for name, line in zip(batch, lines, strict=True):
            if line.strip() and line.strip() != name:
                found.names[name] = line.strip()
            else:
                found.kept += 1  # not a name c++filt knows how to demangle
                found.why_kept = found.why_kept or "c++filt could not demangle them"
    return found
