"""Clients at once over streamable HTTP (a short round of benchmarks/concurrency.py): every call answered, each
answer the asking client's own, no error beyond the refusals the mix asks for."""

from __future__ import annotations

import sys

import anyio

from tests.helpers import REPO

sys.path.insert(0, str(REPO))
from benchmarks.concurrency import run_round  # noqa: E402


def test_four_clients_at_once_get_their_own_answers() -> None:
    result = anyio.run(run_round, 4, 12)
    assert result.calls == 48
    assert result.unexpected == [] and result.cross_talk == []
    assert result.refusals >= 1  # the mix's ../../etc/passwd, refused every time it comes
    assert {"grep_logs", "diagnose_logs", "summarize_trace"} <= set(result.latency)
