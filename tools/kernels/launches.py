"""One kernel launch as every Nsight Compute reader yields it, and what the readers share: numbers as ncu prints
them, units, and which label or metric name means which figure.

Labels changed across ncu generations ("SOL SM" -> "Compute (SM) [%]" -> "Compute (SM) Throughput"); metric names
did not (shared/notes/ncu_format.md, section 5). Both are mapped to one key per figure here, so the readers of the
CSV pages, the text output and the reports fill the same record.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = [
    "FIGURE_BY_LABEL",
    "FIGURE_BY_METRIC",
    "STALL_METRIC",
    "Launch",
    "Rule",
    "duration_ns",
    "parse_number",
    "sol_section",
    "stall_reason",
    "stated_stall",
]


@dataclass
class Rule:
    """A rule result the report stores: OPT/WRN/INF/ERR, its name (or its section for text output), the estimated
    speedup when ncu gives one (2023.2+), and its first sentence."""

    type: str
    name: str
    speedup_pct: float | None
    message: str


@dataclass
class Launch:
    """One kernel launch: its name, launch shape, the figures read (keys of FIGURE_BY_METRIC's values, durations in
    ns, percentages in %), stall reasons (cycles per issued instruction) and rule results."""

    name: str
    grid: str | None = None
    block: str | None = None
    figures: dict[str, float] = field(default_factory=dict)
    stalls: dict[str, float] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    invocations: int = 1  # a --print-summary row stands for this many launches
    nan_values: int = 0  # values printed as nan: a failed launch has nothing else
    # The top stall as the Warp State Statistics rule states it (text and details output without the breakdown):
    # reason -> (cycles per issued instruction, the rule's own % of the cycles between two issues, if it gives one).
    stated_stalls: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    run: int = 0  # which profiling run of a pasted text it came from (a new `$ ncu ...` prompt starts one)

    @property
    def failed(self) -> bool:
        """A launch whose collection failed: grid (0, 0, 0), or every value nan (ncu still lists it)."""
        return (self.grid is not None and _ZERO_SHAPE.match(self.grid) is not None) or (
            self.nan_values > 0 and not self.figures)


_ZERO_SHAPE = re.compile(r"^\(?\s*0\s*,\s*0\s*,\s*0\s*\)?$")

# Figures, keyed by what they are.
SM, MEM, DRAM, L1, L2 = "sm_pct", "memory_pct", "dram_pct", "l1_pct", "l2_pct"
DURATION = "duration_ns"
ACHIEVED, THEORETICAL, WAVES = "achieved_occupancy_pct", "theoretical_occupancy_pct", "waves_per_sm"
LIMIT_REGISTERS, LIMIT_SHARED, LIMIT_WARPS, LIMIT_BLOCKS = ("limit_registers", "limit_shared_mem", "limit_warps",
                                                            "limit_blocks")
REGISTERS, GRID_BLOCKS, BLOCK_THREADS = "registers_per_thread", "grid_blocks", "block_threads"
WARP_CYCLES = "warp_cycles_per_issue"

# Metric names (the raw page, `--metrics` sections), current and pre-Volta.
FIGURE_BY_METRIC: dict[str, str] = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": SM,
    "sm__sol_pct": SM,
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": MEM,
    "gpu__compute_memory_sol_pct": MEM,
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": DRAM,
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": DRAM,
    "fbpa__sol_pct": DRAM,
    "l1tex__throughput.avg.pct_of_peak_sustained_active": L1,
    "tex__sol_pct": L1,
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": L2,
    "ltc__sol_pct": L2,
    "gpu__time_duration.sum": DURATION,
    "gpu__time_duration": DURATION,
    "sm__warps_active.avg.pct_of_peak_sustained_active": ACHIEVED,
    "sm__maximum_warps_per_active_cycle_pct": THEORETICAL,
    "launch__waves_per_multiprocessor": WAVES,
    "launch__occupancy_limit_registers": LIMIT_REGISTERS,
    "launch__occupancy_limit_shared_mem": LIMIT_SHARED,
    "launch__occupancy_limit_warps": LIMIT_WARPS,
    "launch__occupancy_limit_blocks": LIMIT_BLOCKS,
    "launch__registers_per_thread": REGISTERS,
    "launch__grid_size": GRID_BLOCKS,
    "launch__block_size": BLOCK_THREADS,
    "smsp__average_warp_latency_per_inst_issued.ratio": WARP_CYCLES,
}
# The stall breakdown of Warp State Statistics, one metric per reason.
STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")

# Labels of the details page and the text output, by the section they are in (None: any section). Labels of the
# Speed Of Light section from every generation; "Memory Throughput" is also a bandwidth in Memory Workload Analysis,
# so the section decides.
_SOL_LABELS = {
    "Compute (SM) Throughput": SM, "Compute (SM) [%]": SM, "SOL SM": SM, "SM [%]": SM,
    "Memory Throughput": MEM, "Memory [%]": MEM, "SOL Memory": MEM,
    "DRAM Throughput": DRAM, "SOL DRAM": DRAM, "SOL FB": DRAM,
    "L1/TEX Cache Throughput": L1, "SOL L1/TEX Cache": L1, "SOL TEX": L1,
    "L2 Cache Throughput": L2, "SOL L2 Cache": L2, "SOL L2": L2,
    "Duration": DURATION,
}
_OTHER_LABELS = {
    "Waves Per SM": WAVES, "Registers Per Thread": REGISTERS, "Grid Size": GRID_BLOCKS, "Block Size": BLOCK_THREADS,
    "Theoretical Occupancy": THEORETICAL, "Achieved Occupancy": ACHIEVED,
    "Block Limit Registers": LIMIT_REGISTERS, "Block Limit Shared Mem": LIMIT_SHARED,
    "Block Limit Warps": LIMIT_WARPS, "Block Limit SM": LIMIT_BLOCKS,
    "Warp Cycles Per Issued Instruction": WARP_CYCLES,
}
FIGURE_BY_LABEL: dict[tuple[bool, str], str] = {
    **{(True, label): key for label, key in _SOL_LABELS.items()},
    **{(False, label): key for label, key in _OTHER_LABELS.items()},
}
_PERCENT_FIGURES = frozenset({SM, MEM, DRAM, L1, L2, ACHIEVED, THEORETICAL})


def sol_section(section: str) -> bool:
    """Whether a section holds the Speed Of Light figures (its name in every generation; the chart sections and
    the Roofline are not it, nor the sub-table "GPU Throughput" of 2025's text output, which repeats them)."""
    lowered = section.lower()
    return ("speed of light" in lowered and "roofline" not in lowered and "chart" not in lowered) or (
        lowered == "gpu throughput")


def figure_for_label(section: str | None, label: str, unit: str) -> str | None:
    """The figure a (section, label, unit) row of the details page or the text output gives, or None."""
    label = label.strip()
    if section is None or sol_section(section):
        key = FIGURE_BY_LABEL.get((True, label))
        if key is not None and (key not in _PERCENT_FIGURES or unit in ("%", "")):
            return key
    key = FIGURE_BY_LABEL.get((False, label))
    if key is not None and key in _PERCENT_FIGURES and unit not in ("%", ""):
        return None
    if key is None and section is not None and "command line" in section.lower():
        return FIGURE_BY_METRIC.get(label)  # `--metrics a,b`: metric names as labels
    return key


_THOUSANDS_SPACE = re.compile(r"^[+-]?\d{1,3}( \d{3})+([.,]\d+)?$")  # `23 982 976`, `23 111 929,56` (Swedish locale)
_THOUSANDS_COMMA = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_THOUSANDS_DOT = re.compile(r"^[+-]?\d{1,3}(\.\d{3})+(,\d+)?$")
_DECIMAL_COMMA = re.compile(r"^[+-]?\d+,\d+$")


def parse_number(text: str) -> float | None:
    """A value as ncu prints it: thousands separators (`1,196,204`), the European locales (`9.420.231,80`, `4,17`,
    `23 111 929,56`), `(!) nan`, `n/a`. None when it is no number (or nan: ncu's mark of a value it could not
    collect)."""
    value = text.strip().replace("(!)", "").strip().replace("\u00a0", "")
    if not value or value.lower() in ("n/a", "nan", "-nan", "inf", "-inf"):
        return None
    if _THOUSANDS_SPACE.match(value):
        value = value.replace(" ", "")
    if _THOUSANDS_COMMA.match(value):
        value = value.replace(",", "")
    elif _THOUSANDS_DOT.match(value) and (value.count(".") > 1 or "," in value):
        value = value.replace(".", "").replace(",", ".")
    elif _DECIMAL_COMMA.match(value):
        value = value.replace(",", ".")
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def is_nan(text: str) -> bool:
    return text.replace("(!)", "").strip().lower() in ("nan", "-nan")


# Time units across generations, base and auto-scaled.
_NS_PER_UNIT = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "usec": 1e3, "msecond": 1e6, "ms": 1e6,
                "msec": 1e6, "second": 1e9, "s": 1e9, "sec": 1e9}


def duration_ns(value: float, unit: str) -> float | None:
    """A duration in ns, from the unit it was printed in; an empty unit is ns (ncu 2024.1 leaves units empty on
    reports from GPUs it does not know, values in base units); another unit is no duration."""
    scale = _NS_PER_UNIT.get(unit.strip().lower(), 1.0 if not unit.strip() else None)
    return None if scale is None else value * scale


def stall_reason(section: str | None, label: str) -> str | None:
    """The stall reason of a row of the Warp State Statistics breakdown (`Stall Long Scoreboard` -> long_scoreboard,
    `Selected` -> selected), as `--print-details all` prints it in text and CSV; None for any other row."""
    if section is None or "warp state" not in section.lower():
        return None
    label = label.strip()
    if label == "Selected":
        return "selected"
    if not label.startswith("Stall "):
        return None
    return re.sub(r"\W+", "_", label[len("Stall "):].strip().lower()).strip("_") or None


_STATED = re.compile(r"spends (?P<cycles>[\d.,]+) cycles being stalled (?P<what>[^.]*(?:\.\d[^.]*)*)\.(?:[^.]*?This "
                     r"represents about (?P<pct>[\d.,]+) ?% of the total average)?", re.IGNORECASE)
# What the Warp State Statistics rule (CPIStall) says a warp waits for, by reason; first match wins (the L1TEX
# scoreboard's text names texture operations too).
_STATED_REASONS = (
    ("immediate constant cache", "imc_miss"), ("scoreboard dependency on a l1tex", "long_scoreboard"),
    ("scoreboard dependency on a mio", "short_scoreboard"), ("mio (memory input/output) instruction queue",
                                                              "mio_throttle"),
    ("local and global (lg) memory", "lg_throttle"), ("fixed latency execution dependency", "wait"),
    ("cta barrier", "barrier"), ("memory barrier", "membar"), ("math execution pipeline", "math_pipe_throttle"),
    ("after an exit", "drain"), ("after exit", "drain"), ("branch target", "branch_resolving"),
    ("queue for texture", "tex_throttle"),
    ("instruction cache miss", "no_instruction"), ("fetch an instruction", "no_instruction"),
    ("dispatch", "dispatch_stall"), ("sleeping", "sleeping"), ("warpgroup", "gmma"),
)


def stated_stall(message: str) -> tuple[str, float, float | None] | None:
    """(reason, cycles per issued instruction, the rule's % of the cycles between two issues or None) from the
    Warp State Statistics rule's text ("... spends 20.5 cycles being stalled waiting for sibling warps at a CTA
    barrier. This represents about 58.0% of the total average of 35.4 cycles ..."); None for another rule or a
    wording not known here."""
    found = _STATED.search(" ".join(message.split()))
    if found is None:
        return None
    what = found.group("what").lower()
    reason = next((r for phrase, r in _STATED_REASONS if phrase in what), None)
    cycles = parse_number(found.group("cycles"))
    if reason is None or cycles is None:
        return None
    pct = parse_number(found.group("pct")) if found.group("pct") else None
    return reason, cycles, pct
