"""check_interconnect on what round 13's development outputs (tests/data/interconnect/round13/dev; each file's source
URL is its line in dev/cases.jsonl) showed it missing: NCCL's network lines quoted in a write-up without their
`host:pid:tid [dev] NCCL INFO` prefix. The held-out part is never read here."""

from __future__ import annotations

import anyio

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.interconnect import CheckInterconnectInput, check_interconnect

DEV = DATA / "interconnect" / "round13" / "dev"


def test_bare_nccl_network_lines_are_read() -> None:
    # kreuzhofer/dgx-manager: `NET/IB : Using [0]rocep1s0f0:1/RoCE` and `NET/NCCL RDMA Plugin v10 : GPU Direct RDMA
    # Disabled for HCA 0 'rocep1s0f0'` quoted bare in a write-up: read, and GPU Direct RDMA is off.
    result = anyio.run(check_interconnect, CheckInterconnectInput(nccl_logs=["nccl_log__kreuzhofer-dgx-manager-1.txt"]),
                       ToolContext(roots=(DEV.resolve(),), timeout_s=60))
    assert [t.network for t in result.transports] == ["IB"]
    no_gdr = [f for f in result.findings if f.kind == "no_gdr"]
    assert no_gdr and "GPU Direct RDMA Disabled for HCA 0" in no_gdr[0].evidence
