"""Arithmetic on sets of time intervals [start, end): union, total length, intersection, difference.

Every busy/idle figure of the trace summary is computed on merged intervals, so overlapping kernels on
several streams are never counted twice. Two forms: lists of (start, end) tuples for the small sets, and
`Spans` (two numpy arrays, the same operations vectorised) for the large ones a trace's GPU gaps make.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

__all__ = ["Intervals", "Spans", "clip", "intersect", "merge", "subtract", "total"]

Intervals = list[tuple[float, float]]


def merge(intervals: Iterable[tuple[float, float]]) -> Intervals:
    """Sorted, non-overlapping union of the intervals (empty ones dropped)."""
    return _merge_sorted(sorted(intervals))


def _merge_sorted(pairs: Iterable[tuple[float, float]]) -> Intervals:
    merged: Intervals = []
    for start, end in pairs:
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def total(merged: Intervals) -> float:
    return sum(end - start for start, end in merged)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two merged interval lists (two-pointer walk)."""
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of merged `a` not covered by merged `b`."""
    out: Intervals = []
    j = 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(merged: Intervals, start: float, end: float) -> Intervals:
    """The parts of merged intervals inside [start, end): a binary search, then only the pieces inside."""
    if end <= start:
        return []
    out: Intervals = []
    i = max(bisect.bisect_right(merged, (start, float("inf"))) - 1, 0)
    while i < len(merged) and merged[i][0] < end:
        a, b = merged[i]
        if b > start:
            out.append((max(a, start), min(b, end)))
        i += 1
    return out


class Spans:
    """A sorted, disjoint set of intervals as two numpy arrays: the same arithmetic as the list functions above,
    vectorised, at 16 bytes an interval instead of ~100 (a trace of millions of kernels has as many gaps)."""

    __slots__ = ("_before", "ends", "starts")

    def __init__(self, starts: Any, ends: Any) -> None:
        self.starts: np.ndarray[Any, np.dtype[np.float64]] = np.asarray(starts, dtype=np.float64)
        self.ends: np.ndarray[Any, np.dtype[np.float64]] = np.asarray(ends, dtype=np.float64)
        self._before: np.ndarray[Any, np.dtype[np.float64]] | None = None  # prefix sums, for within()

    @classmethod
    def of(cls, merged: Intervals) -> Spans:
        return cls([a for a, _ in merged], [b for _, b in merged])

    @classmethod
    def union(cls, starts: Any, ends: Any) -> Spans:
        """The union of intervals given by starts already in order (their ends in any order)."""
        starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
        present = ends > starts
        if not present.all():  # empty intervals dropped (a copy only when there are some)
            starts, ends = starts[present], ends[present]
        del present
        if not len(starts):
            return cls([], [])
        reach = np.maximum.accumulate(ends)
        opens = np.empty(len(starts), dtype=bool)
        opens[0] = True
        opens[1:] = starts[1:] > reach[:-1]
        first = np.flatnonzero(opens)
        return cls(starts[first], reach[np.append(first[1:] - 1, len(starts) - 1)])

    def __len__(self) -> int:
        return len(self.starts)

    def __bool__(self) -> bool:
        return len(self.starts) > 0

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.starts.tolist(), self.ends.tolist(), strict=True)

    def total(self) -> float:
        return float((self.ends - self.starts).sum())

    def clip(self, start: float, end: float) -> Spans:
        if end <= start:
            return Spans([], [])
        low = int(np.searchsorted(self.ends, start, side="right"))
        high = int(np.searchsorted(self.starts, end, side="left"))
        return Spans(np.maximum(self.starts[low:high], start), np.minimum(self.ends[low:high], end))

    def intersect(self, other: Spans) -> Spans:
        """Each interval of self against the run of other's intervals it meets."""
        low = np.searchsorted(other.ends, self.starts, side="right")
        high = np.searchsorted(other.starts, self.ends, side="left")
        counts = np.maximum(high - low, 0)
        if not counts.sum():
            return Spans([], [])
        mine = np.repeat(np.arange(len(self)), counts)
        theirs = np.repeat(low - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        starts = np.maximum(self.starts[mine], other.starts[theirs])
        ends = np.minimum(self.ends[mine], other.ends[theirs])
        keep = ends > starts
        return Spans(starts[keep], ends[keep])

    def subtract(self, other: Spans) -> Spans:
        """The parts of self outside other: self against the gaps around other's intervals."""
        if not other or not self:
            return Spans(self.starts.copy(), self.ends.copy())
        gaps = Spans(np.append(-np.inf, other.ends), np.append(other.starts, np.inf))
        return self.intersect(gaps)

    def where(self, keep: Any) -> Spans:
        """The intervals a boolean mask selects."""
        return Spans(self.starts[keep], self.ends[keep])

    def within(self, start: float, end: float) -> float:
        """How much of the set lies inside [start, end): two binary searches over prefix sums, so that many
        calls (every long CPU op against every GPU gap) stay cheap."""
        if end <= start or not len(self.starts):
            return 0.0
        if self._before is None:
            self._before = np.concatenate(([0.0], np.cumsum(self.ends - self.starts)))
        return self._up_to(end) - self._up_to(start)

    def within_each(self, starts: Any, ends: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
        """within() for many intervals at once (arrays of starts and ends): the same prefix sums, vectorised."""
        starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
        if not len(self.starts) or not len(starts):
            return np.zeros(len(starts))
        if self._before is None:
            self._before = np.concatenate(([0.0], np.cumsum(self.ends - self.starts)))
        return np.where(ends > starts, self._up_to_each(ends) - self._up_to_each(starts), 0.0)

    def _up_to_each(self, points: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
        assert self._before is not None
        i = np.searchsorted(self.starts, points, side="right")
        previous_end = self.ends[np.maximum(i - 1, 0)]
        inside = (i > 0) & (previous_end > points)
        return self._before[i] - np.where(inside, previous_end - points, 0.0)

    def _up_to(self, point: float) -> float:
        assert self._before is not None
        i = int(np.searchsorted(self.starts, point, side="right"))
        covered = float(self._before[i])
        if i and self.ends[i - 1] > point:
            covered -= float(self.ends[i - 1]) - point
        return covered

    @staticmethod
    def join(*sets: Spans) -> Spans:
        """The union of several sets."""
        starts = np.concatenate([s.starts for s in sets]) if sets else np.array([])
        ends = np.concatenate([s.ends for s in sets]) if sets else np.array([])
        order = np.argsort(starts, kind="stable")
        return Spans.union(starts[order], ends[order])
