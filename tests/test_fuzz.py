"""A short seeded slice of benchmarks/fuzz.py: every reader fed mutated real inputs must answer with a result or a
clear refusal, never a traceback, and never past its deadline (the full run is 2000 cases a reader)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO))
from benchmarks.fuzz import READERS, run_reader  # noqa: E402


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
def test_mutated_real_inputs_get_a_result_or_a_clear_refusal(reader) -> None:  # type: ignore[no-untyped-def]
    tally = run_reader(reader, cases=25, seed=20261201, show=1)
    assert tally.cases == 25
    assert tally.tracebacks == 0, tally.samples
    assert tally.late == 0
    assert tally.errors + tally.results == 25
