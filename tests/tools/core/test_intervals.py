"""tools.core.intervals: the numpy Spans agree with the list functions on the same sets, edges included."""

from __future__ import annotations

import random

import pytest

from tools.core.intervals import Spans, clip, intersect, merge, subtract, total


def _random_set(rng: random.Random) -> list[tuple[float, float]]:
    return merge((x := rng.uniform(0, 100), x + rng.uniform(0, 10)) for _ in range(rng.randint(0, 30)))


@pytest.mark.parametrize("seed", range(40))
def test_spans_match_the_list_functions(seed: int) -> None:
    rng = random.Random(seed)
    a, b = _random_set(rng), _random_set(rng)
    sa, sb = Spans.of(a), Spans.of(b)
    assert list(sa.intersect(sb)) == intersect(a, b)
    assert [x for pair in sa.subtract(sb) for x in pair] == pytest.approx([x for pair in subtract(a, b) for x in pair])
    low, high = sorted((rng.uniform(-5, 105), rng.uniform(-5, 105)))
    assert list(sa.clip(low, high)) == clip(a, low, high)
    assert sa.within(low, high) == pytest.approx(total(clip(a, low, high)))
    queries = [(x, x + rng.uniform(-2, 30)) for x in (rng.uniform(-10, 110) for _ in range(25))]
    expected = [total(clip(a, s, e)) for s, e in queries]
    assert sa.within_each([s for s, _ in queries], [e for _, e in queries]).tolist() == pytest.approx(expected)
    pairs = sorted((x, x + rng.uniform(0, 5)) for x in (rng.uniform(0, 100) for _ in range(20)))
    assert list(Spans.union([p for p, _ in pairs], [q for _, q in pairs])) == merge(pairs)
    assert list(Spans.join(sa, sb)) == merge([*a, *b])


def test_touching_intervals_merge_and_empty_ones_drop() -> None:
    assert list(Spans.union([0, 2, 5], [2, 4, 5])) == [(0.0, 4.0)]
    assert not Spans.union([], []) and Spans([], []).total() == 0.0
    assert list(Spans([0], [10]).subtract(Spans([0, 5], [2, 10]))) == [(2.0, 5.0)]
    assert Spans([0, 20], [10, 30]).within(5, 25) == 10.0
    # Many at once: inside one interval, across a gap, ending on an edge, reversed, and on an empty set.
    assert Spans([0, 20], [10, 30]).within_each([2, 5, 10, 25], [4, 25, 20, 5]).tolist() == [2.0, 10.0, 0.0, 0.0]
    assert Spans([], []).within_each([0], [5]).tolist() == [0.0]
