"""Periodic dips in a series sampled at a fixed interval (GPU or CPU utilisation): the period, how deep and how long
the dips are, and how many cycles back it.

Autocorrelation of the mean-removed series: the first lag whose correlation stands out of the noise band (a white
series' correlations spread about 1/sqrt(n)) and is a local peak is the candidate; the periodogram's strongest
frequency near it refines it. At least PERIOD_MIN_CYCLES cycles must fit in the window, and the shortest period
told is two samples (Nyquist), so a window says which periods it can and cannot see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tools.core.thresholds import PERIOD_MIN_CORRELATION, PERIOD_MIN_CYCLES, PERIOD_MIN_PEAK_RATIO

__all__ = ["Periodic", "find_period", "visible_periods"]


@dataclass(frozen=True)
class Periodic:
    period_s: float
    dip_depth_pct: float  # median minus the dips' level, in the series' own points (percent for utilisation)
    duty_pct: float  # share of the samples inside a dip
    cycles: float
    correlation: float  # the autocorrelation at the period


def visible_periods(samples: int, interval_s: float) -> tuple[float, float]:
    """The shortest and longest period a window of `samples` can tell."""
    return 2 * interval_s, samples * interval_s / PERIOD_MIN_CYCLES


def find_period(values: Sequence[float], interval_s: float) -> Periodic | None:
    series = np.asarray(values, dtype=np.float64)
    n = len(series)
    if n < 2 * PERIOD_MIN_CYCLES or not np.isfinite(series).all() or series.std() == 0:
        return None
    centred = series - series.mean()
    full = np.correlate(centred, centred, mode="full")[n - 1 :]
    acf = full / full[0]
    band = max(PERIOD_MIN_CORRELATION, 2.5 / np.sqrt(n))
    longest = int(n / PERIOD_MIN_CYCLES)
    # A period repeats: the correlation stands out at the lag and again at twice it (a noise peak does not).
    lag = next((k for k in range(2, longest + 1) if acf[k] >= band and acf[k] >= acf[k - 1]
                and (k + 1 >= len(acf) or acf[k] >= acf[k + 1]) and (2 * k >= len(acf) or acf[2 * k] >= band / 2)),
               None)
    if lag is None:
        return None
    # The periodogram's peak near 1/lag, for a period between samples; it must stand well above the spectrum's
    # typical power (white noise's largest of n/2 bins is a few times its median).
    spectrum = np.abs(np.fft.rfft(centred)) ** 2
    frequencies = np.fft.rfftfreq(n, d=interval_s)
    near = (frequencies > 0) & (np.abs(1 / np.maximum(frequencies, 1e-12) - lag * interval_s) <= interval_s * 1.5)
    if not near.any() or spectrum[near].max() < PERIOD_MIN_PEAK_RATIO * float(np.median(spectrum[1:])):
        return None
    period = float(1 / frequencies[near][np.argmax(spectrum[near])])
    median = float(np.median(series))
    low = float(np.percentile(series, 10))
    depth = median - low
    if depth <= 0:
        return None
    duty = float(np.mean(series < median - depth / 2)) * 100
    return Periodic(period_s=round(period, 3), dip_depth_pct=round(depth, 1), duty_pct=round(duty, 1),
                    cycles=round(n * interval_s / period, 1), correlation=round(float(acf[lag]), 3))
