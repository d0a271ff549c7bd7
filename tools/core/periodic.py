"""Periodic dips in a series sampled at a fixed interval (GPU or CPU utilisation): the period, how deep and how long
the dips are, and how many cycles back it.

Autocorrelation of the mean-removed series: the first lag whose correlation stands out of the noise band (a white
series' correlations spread about 1/sqrt(n)) and is a local peak is the candidate; the periodogram's strongest
frequency near it refines it. At least PERIOD_MIN_CYCLES cycles must fit in the window, and the shortest period
told is two samples (Nyquist), so a window says which periods it can and cannot see.

With the job's step logs, the period is also told in steps: the period divided by the mean step time (the mean, not
the median: the slow step the dip comes from is part of every period).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, Field

from tools.core.thresholds import (
    PERIOD_MIN_CORRELATION,
    PERIOD_MIN_CYCLE_SHARE,
    PERIOD_MIN_CYCLES,
    PERIOD_MIN_PEAK_RATIO,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DIPS_FIX", "Periodic", "PeriodicDips", "StepDuration", "dips_across", "dips_evidence", "dips_in",
           "find_period", "visible_periods"]

DIPS_FIX = ("Find what runs every that many steps (checkpoint, eval, logging, a drained prefetch buffer): make it "
            "asynchronous, less frequent, or overlap it with compute")


class PeriodicDips(BaseModel):
    series: str = Field(description="What dips: a GPU's utilisation or SM %, the trainer's CPU, or the host's.")
    period_s: float
    dip_depth_pct: float = Field(description="The usual level minus the dips' level, in points of %.")
    duty_pct: float = Field(description="% of the samples inside a dip.")
    cycles: float
    period_steps: int | None = Field(default=None, description="The period in steps, when step logs were given.")


@dataclass(frozen=True)
class Periodic:
    period_s: float
    dip_depth_pct: float  # the usual level minus the dips' level, in the series' points (percent for utilisation)
    duty_pct: float  # share of the samples inside a dip
    cycles: float
    correlation: float  # the autocorrelation at the period


def visible_periods(samples: int, interval_s: float) -> tuple[float, float]:
    """The shortest and longest period a window of `samples` can tell."""
    return 2 * interval_s, samples * interval_s / PERIOD_MIN_CYCLES


def find_period(values: Sequence[float], interval_s: float) -> Periodic | None:
    import numpy as np  # here, not at import: building the server must not load the engines

    series = np.asarray(values, dtype=np.float64)
    n = len(series)
    if n < 2 * PERIOD_MIN_CYCLES or not np.isfinite(series).all() or series.std() == 0:
        return None
    centred = series - series.mean()
    full = np.correlate(centred, centred, mode="full")[n - 1 :]
    acf = full / full[0]
    band = max(PERIOD_MIN_CORRELATION, 2.5 / np.sqrt(n))
    longest = int(n / PERIOD_MIN_CYCLES)
    # A period repeats: the correlation stands out at the lag and again at twice it (a noise peak does not). The
    # candidates are tried shortest first: a short pattern inside bursts can stand out before the bursts' own period.
    candidates = [k for k in range(2, longest + 1) if acf[k] >= band and acf[k] >= acf[k - 1]
                  and (k + 1 >= len(acf) or acf[k] >= acf[k + 1]) and (2 * k >= len(acf) or acf[2 * k] >= band / 2)]
    spectrum = np.abs(np.fft.rfft(centred)) ** 2
    frequencies = np.fft.rfftfreq(n, d=interval_s)
    # The two levels the series moves between, split halfway from its low to its high: a long idle half (an eval
    # or a benchmark's pause, duty 50 %) as much as short dips.
    low_edge, high_edge = (float(x) for x in np.percentile(series, [10, 90]))
    below = series < (low_edge + high_edge) / 2
    if below.all() or not below.any():
        return None
    for lag in candidates[:8]:
        period = _refined(lag, spectrum, frequencies, interval_s)
        if period is None or not _holds(below, round(period / interval_s)):
            continue
        depth = float(np.median(series[~below]) - np.median(series[below]))
        return Periodic(period_s=round(period, 3), dip_depth_pct=round(depth, 1),
                        duty_pct=round(float(below.mean()) * 100, 1), cycles=round(n * interval_s / period, 1),
                        correlation=round(float(acf[lag]), 3))
    return None


def _refined(lag: int, spectrum: np.ndarray, frequencies: np.ndarray, interval_s: float) -> float | None:
    """The periodogram's peak near 1/lag, for a period between samples; it must stand well above the spectrum's
    typical power (white noise's largest of n/2 bins is a few times its median)."""
    import numpy as np

    near = (frequencies > 0) & (np.abs(1 / np.maximum(frequencies, 1e-12) - lag * interval_s) <= interval_s * 1.5)
    if not near.any() or spectrum[near].max() < PERIOD_MIN_PEAK_RATIO * float(np.median(spectrum[1:])):
        return None
    return float(1 / frequencies[near][np.argmax(spectrum[near])])


def _holds(below: np.ndarray, length: int) -> bool:
    """A period holds across the window: most stretches one period long go both below and above the middle (a
    pattern seen only inside a few bursts, or two idle spells, is no period)."""
    length = max(2, length)
    stretches = below[: len(below) // length * length].reshape(-1, length)
    if stretches.size == 0:
        return False
    return float((stretches.any(axis=1) & ~stretches.all(axis=1)).mean()) >= PERIOD_MIN_CYCLE_SHARE


class StepDuration(Protocol):
    """A job's mean step time (tools.steps.mean_step_time gives one)."""

    @property
    def mean_s(self) -> float: ...


def dips_in(values: Sequence[float], interval_s: float, series: str, steps: StepDuration | None
            ) -> tuple[PeriodicDips | None, str | None]:
    """The periodic dips of one series, or the note that says what this window could and could not see."""
    found = find_period(values, interval_s)
    if found is None:
        shortest, longest = visible_periods(len(values), interval_s)
        if longest < shortest:
            return None, (f"{series}: {len(values)} sample(s) are too few to tell a period (it takes "
                          f"{PERIOD_MIN_CYCLES:g} cycles of at least 2 samples).")
        return None, (f"No periodic dip in {series}: this window tells periods of {shortest:.3g}-{longest:.3g} s "
                      "(a checkpoint every few minutes needs a longer one).")
    period_steps = max(1, round(found.period_s / steps.mean_s)) if steps is not None and steps.mean_s > 0 else None
    return PeriodicDips(series=series, period_s=found.period_s, dip_depth_pct=found.dip_depth_pct,
                        duty_pct=found.duty_pct, cycles=found.cycles, period_steps=period_steps), None


def dips_across(candidates: Sequence[tuple[Sequence[float], float, str]], steps: StepDuration | None,
                notes_up_to: int = 4) -> tuple[list[PeriodicDips], list[str]]:
    """The periodic dips of several series (values, interval, name), deepest first; and, where there are at most
    `notes_up_to` series, the note of each that has none (more would only repeat one another)."""
    found: list[PeriodicDips] = []
    notes: list[str] = []
    for values, interval_s, series in candidates:
        dips, note = dips_in(values, interval_s, series, steps)
        if dips is not None:
            found.append(dips)
        elif note is not None and len(candidates) <= notes_up_to:
            notes.append(note)
    return sorted(found, key=lambda d: -d.dip_depth_pct), notes


def dips_evidence(dips: PeriodicDips) -> str:
    every = f"every {dips.period_s:g} s" + (f" (about every {dips.period_steps} steps)" if dips.period_steps else "")
    return (f"{dips.series} dips {every}: {dips.cycles:g} cycles, {dips.dip_depth_pct:g} points deep, "
            f"{dips.duty_pct:.0f} % of the time")
