"""Nsight Compute's kernels joined with a trace of the same job (a Kineto trace, a folder of them, or an Nsight
Systems export or report), by kernel name: which share of the trace's GPU time each profiled kernel holds, and which
of the trace's kernels have no ncu data.

The trace is read by the project's trace readers (tools.traces: the same kernel totals summarize_trace gives), never
by a reader of our own. Names are compared in the forms of tools/core/kernel_names.py, strictest first: the whole
name; the name without its parameters; for a name cut short, its beginning; the qualified function (template
arguments and parameters aside); the bare function name. A trace kernel joins at most one profiled name; profiled
names that meet the same trace kernels at the same level share them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from tools.core.kernel_names import bare_function, full_form, instance_form, is_cut, qualified_function
from tools.core.models import Coverage
from tools.traces import breakdown, exported_reports, trace_files

__all__ = ["Match", "TraceKernel", "TraceKernels", "join", "read_trace_kernels"]


@dataclass
class TraceKernel:
    name: str
    launches: int
    total_us: float
    kind: str  # compute, comm, memory or other, as summarize_trace classes them

    @property
    def profilable(self) -> bool:
        """A kernel ncu can profile: not a copy or memset, not a collective, not a graph replay's summary row."""
        return self.kind not in ("memory", "comm") and not self.name.startswith("CUDA graph ")


@dataclass
class TraceKernels:
    kernels: list[TraceKernel]
    total_us: float  # all the GPU work the trace counts (kernels, copies, memsets): the base of every share
    coverage: list[Coverage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def profilable_us(self) -> float:
        return sum(k.total_us for k in self.kernels if k.profilable)

    def share_pct(self, us: float) -> float:
        return round(100 * us / self.total_us, 2) if self.total_us > 0 else 0.0


async def read_trace_kernels(path: Path, roots: tuple[Path, ...], timeout_s: float) -> TraceKernels:
    """Every kernel of the trace (all ranks summed) with its launches and GPU time. UnreadableInput as the trace
    readers raise it."""
    files = trace_files(path, roots)
    deadline = time.monotonic() + timeout_s
    async with exported_reports(files, timeout_s) as readable:
        found = await anyio.to_thread.run_sync(breakdown, readable, roots, True, deadline, abandon_on_cancel=True)
    kernels = [TraceKernel(name, count, us, kind) for name, (count, us, kind) in found.kernels.items()]
    kernels.sort(key=lambda k: -k.total_us)
    return TraceKernels(kernels, sum(k.total_us for k in kernels), list(found.coverage), list(found.notes[:3]))


@dataclass
class Match:
    trace_kernels: list[TraceKernel]
    how: str
    sharing: int  # profiled names that share these trace kernels (1: this name alone)

    @property
    def total_us(self) -> float:
        return sum(k.total_us for k in self.trace_kernels)


_EXACT = ((full_form, "same name"), (instance_form, "same function and template arguments, parameters aside"))
_LOOSE = ((qualified_function, "same function, template arguments and parameters aside"),
          (bare_function, "same function name, namespaces aside"))


def join(names: Sequence[str], trace: TraceKernels) -> tuple[dict[str, Match], list[TraceKernel]]:
    """Each profiled name (as the row shows it, demangled) found in the trace, and the trace's profilable kernels
    left unmatched (the most GPU time first). A name cut short is tried by its beginning before the looser forms,
    which would take every instance of its function."""
    remaining = [k for k in trace.kernels if k.profilable]
    unmatched = list(dict.fromkeys(names))
    matches: dict[str, Match] = {}

    def by_form(form: Callable[[str], str], how: str) -> None:
        nonlocal remaining, unmatched
        kernels: dict[str, list[TraceKernel]] = defaultdict(list)
        for kernel in remaining:
            kernels[form(kernel.name)].append(kernel)
        claims: dict[str, list[str]] = defaultdict(list)
        for name in unmatched:
            key = form(name)
            if key and key in kernels:
                claims[key].append(name)
        used: set[int] = set()
        for key, claimants in claims.items():
            group = kernels[key]
            many = f" ({len(group)} instances in the trace)" if len(group) > 1 else ""
            for name in claimants:
                matches[name] = Match(group, how + many, len(claimants))
            used.update(id(k) for k in group)
        unmatched = [n for n in unmatched if n not in matches]
        remaining = [k for k in remaining if id(k) not in used]

    for form, how in _EXACT:
        by_form(form, how)
    for name in [n for n in unmatched if is_cut(n)]:
        prefix = full_form(name)
        group = [k for k in remaining if prefix and full_form(k.name).startswith(prefix)]
        if group:
            matches[name] = Match(group, "by its beginning (the name was cut short)", 1)
            taken = {id(k) for k in group}
            remaining = [k for k in remaining if id(k) not in taken]
    unmatched = [n for n in unmatched if n not in matches]
    for form, how in _LOOSE:
        by_form(form, how)
    return matches, remaining
