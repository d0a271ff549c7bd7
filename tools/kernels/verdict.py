"""The verdict on one kernel, by NVIDIA's own bottleneck rule (Nsight Compute's SOLBottleneck, on Compute (SM)
Throughput and Memory Throughput; shared/notes/ncu_format.md, section 6):

1. both below 60 % of peak: latency_bound (why: a grid under one wave, low occupancy and what limits it, the top
   stall reason);
2. else within 10 points of each other: balanced;
3. else the larger: compute_bound, or memory_bound (DRAM when DRAM is near the busiest memory unit, else the cache
   level: 95 % Memory with 1 % DRAM is L1/shared-bound).

Borderline when the larger is within 3 points of 60, or the gap within 2 of 10: either neighbour is defensible.
DRAM % is reported but never decides. Without both SOL figures: unknown, with the ncu command that collects them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tools.core.thresholds import (
    KERNEL_BALANCED_GAP_PCT,
    KERNEL_BORDERLINE_GAP_PCT,
    KERNEL_BORDERLINE_PCT,
    KERNEL_BOUND_PCT,
    KERNEL_DRAM_NEAR_PCT,
    KERNEL_LOW_OCCUPANCY_PCT,
    KERNEL_SMALL_GRID_WAVES,
)

__all__ = ["Judgement", "KernelVerdict", "judge", "occupancy_limiter"]

KernelVerdict = Literal["compute_bound", "memory_bound", "latency_bound", "balanced", "unknown"]

# The stall reasons' meanings, after the Profiling Guide's Warp Stall Reasons table.
_STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory (L1TEX) results",
    "short_scoreboard": "waiting on shared memory or special-function results",
    "barrier": "waiting at __syncthreads()",
    "membar": "waiting on a memory barrier",
    "mio_throttle": "the shared-memory/special-function instruction queue is full",
    "lg_throttle": "the global/local memory instruction queue is full",
    "tex_throttle": "the texture/L1 queue is full",
    "math_pipe_throttle": "a math pipe is busy (compute at its limit)",
    "wait": "fixed-latency dependencies",
    "not_selected": "eligible but another warp was picked",
    "dispatch_stall": "the dispatcher stalled",
    "drain": "draining memory stores at exit",
    "imc_miss": "constant-cache misses",
    "branch_resolving": "resolving branch targets",
    "no_instruction": "instruction-cache misses",
    "sleeping": "warps asleep (nanosleep)",
    "misc": "miscellaneous",
    "gmma": "waiting on Hopper's warpgroup MMA",
}
_LIMITERS = (("limit_registers", "registers"), ("limit_shared_mem", "shared memory"),
             ("limit_warps", "block size (warps per block)"), ("limit_blocks", "blocks per SM"))


@dataclass
class Judgement:
    verdict: KernelVerdict
    borderline: bool
    why: str
    cause: str  # for latency_bound: small_grid, low_occupancy, stalls or low_throughput; the unit for memory_bound


def occupancy_limiter(figures: dict[str, float]) -> str | None:
    """What limits theoretical occupancy: the block limit(s) with the fewest blocks per SM, when the theoretical
    occupancy is below 100 % (at 100 % nothing limits it)."""
    limits = {label: figures[key] for key, label in _LIMITERS if key in figures}
    theoretical = figures.get("theoretical_occupancy_pct")
    if not limits or theoretical is None or theoretical >= 99.5:
        return None
    fewest = min(limits.values())
    return ", ".join(label for label, value in limits.items() if value == fewest)


def _stall_text(stalls: list[tuple[str, float]]) -> str:
    if not stalls:
        return ""
    reason, pct = stalls[0]
    return f"top stall {reason} ({pct:.0f} % of stall cycles: {_STALL_MEANING.get(reason, reason)})"


def judge(figures: dict[str, float], stalls: list[tuple[str, float]]) -> Judgement:
    """The verdict from one kernel's figures (averaged over its launches) and its stall reasons, largest first."""
    sm, mem = figures.get("sm_pct"), figures.get("memory_pct")
    if sm is None or mem is None:
        return Judgement("unknown", False, "no Speed Of Light figures (Compute (SM) and Memory Throughput) were "
                         "collected for it: the report was made with --metrics or sections without SpeedOfLight",
                         "")
    top, gap = max(sm, mem), abs(sm - mem)
    borderline = abs(top - KERNEL_BOUND_PCT) < KERNEL_BORDERLINE_PCT or (
        top >= KERNEL_BOUND_PCT and abs(gap - KERNEL_BALANCED_GAP_PCT) < KERNEL_BORDERLINE_GAP_PCT)
    figures_text = f"Compute (SM) {sm:.1f} %, Memory {mem:.1f} %"
    if top < KERNEL_BOUND_PCT:
        return _latency(figures, stalls, figures_text, borderline)
    if gap < KERNEL_BALANCED_GAP_PCT:
        return Judgement("balanced", borderline, f"{figures_text}: both units busy, within "
                         f"{KERNEL_BALANCED_GAP_PCT:.0f} points of each other", "")
    if sm > mem:
        pipe = f"; {_stall_text(stalls)}" if stalls else ""
        return Judgement("compute_bound", borderline, f"{figures_text}: the SM pipes are the busiest unit{pipe}", "")
    unit, unit_text = _memory_unit(figures, mem)
    return Judgement("memory_bound", borderline, f"{figures_text}: {unit_text}", unit)


def _memory_unit(figures: dict[str, float], mem: float) -> tuple[str, str]:
    dram, l1, l2 = figures.get("dram_pct"), figures.get("l1_pct"), figures.get("l2_pct")
    if dram is not None and dram >= mem - KERNEL_DRAM_NEAR_PCT:
        return "dram", f"DRAM {dram:.1f} % is at the memory unit's level: DRAM bandwidth-bound"
    caches = {name: value for name, value in (("L1/TEX (shared memory included)", l1), ("L2", l2))
              if value is not None}
    busiest = max(caches, key=lambda name: caches[name]) if caches else None
    dram_text = f"DRAM only {dram:.1f} %" if dram is not None else "DRAM not collected"
    if busiest is None:
        return "cache", f"{dram_text}: a cache level (L1/TEX, shared memory or L2), not DRAM, is at its peak"
    return ("l1" if busiest.startswith("L1") else "l2"), (f"{dram_text}, {busiest} {caches[busiest]:.1f} %: "
                                                           f"{busiest.split(' ')[0]}-bound, not DRAM")


def _latency(figures: dict[str, float], stalls: list[tuple[str, float]], figures_text: str,
             borderline: bool) -> Judgement:
    reasons = []
    cause = "low_throughput"
    waves, blocks = figures.get("waves_per_sm"), figures.get("grid_blocks")
    achieved, theoretical = figures.get("achieved_occupancy_pct"), figures.get("theoretical_occupancy_pct")
    if waves is not None and waves < KERNEL_SMALL_GRID_WAVES:
        cause = "small_grid"
        grid = f"grid of {blocks:.0f} block{'s' if blocks != 1 else ''}, " if blocks is not None else ""
        reasons.append(f"{grid}{waves:.2f} waves per SM: too few blocks to fill the GPU")
    if achieved is not None and achieved < KERNEL_LOW_OCCUPANCY_PCT:
        limiter = occupancy_limiter(figures)
        cause = "low_occupancy" if cause == "low_throughput" else cause
        theory = f" of {theoretical:.0f} % theoretical" if theoretical is not None else ""
        reasons.append(f"achieved occupancy {achieved:.1f} %{theory}"
                       + (f", limited by {limiter}" if limiter else ""))
    if stalls:
        cause = "stalls" if cause == "low_throughput" else cause
        reasons.append(_stall_text(stalls))
    why = (f"{figures_text}: both below {KERNEL_BOUND_PCT:.0f} % of peak, too little parallelism to hide latency"
           + (f" ({'; '.join(reasons)})" if reasons else ""))
    return Judgement("latency_bound", borderline, why, cause)
