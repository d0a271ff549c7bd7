"""check_interconnect on what round 14's development outputs (tests/data/interconnect/round14/dev; each file's source
URL is its line in dev/cases.jsonl) showed it missing: a paste whose every line a page rendered as a list item, GPU
Direct RDMA that NCCL says it enabled, and a launcher's command line that names the job's two hosts. The held-out
part is never read here."""

from __future__ import annotations

from pathlib import Path

import anyio

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.core.pasted import without_line_markers
from tools.interconnect import CheckInterconnectInput, CheckInterconnectResult, check_interconnect
from tools.interconnect.nccl_log import launched_nodes

DEV = DATA / "interconnect" / "round14" / "dev"


def check(root: Path = DEV, **given: list[str]) -> CheckInterconnectResult:
    params = CheckInterconnectInput(live=False, **given)  # type: ignore[arg-type]
    return anyio.run(check_interconnect, params, ToolContext(roots=(root.resolve(),), timeout_s=60))


def test_list_markers_a_page_added_are_taken_off_before_reading() -> None:
    # https://pastebin.com/5AwqNUAB: ibv_devinfo and ibstatus, each line rendered as `- state: PORT_DOWN (1)`; no
    # port of the InfiniHost III is Active (port 1 INIT, port 2 DOWN).
    result = check(captures=["ibv_devinfo__site-pastebin.com-1.txt"])
    down = [f for f in result.findings if f.kind == "ib_port_down"]
    assert len(down) == 2 and down[0].evidence.startswith("mthca0:1 is Initializing / LinkUp (0 of 2 ports up)")
    assert without_line_markers("- a: 1\n- b: 2\n- c: 3\n") == "a: 1\nb: 2\nc: 3\n"
    assert without_line_markers("- a: 1\nb: 2\nc: 3\n") == "- a: 1\nb: 2\nc: 3\n"  # the output's own list


def test_an_ib_header_with_no_port_state_is_not_understood(tmp_path: Path) -> None:
    (tmp_path / "ibstatus.txt").write_text("Infiniband device 'mlx5_0' port 1 status:\n  (cut here)\n")
    result = check(tmp_path, captures=["ibstatus.txt"])
    assert result.severity.value == "unknown" and not result.findings
    assert result.coverage[0].status == "not_understood"


def test_gdr_nccl_says_it_enabled_is_not_lost_on_send_channels() -> None:
    # https://github.com/mark-ramsey-ri/vllm-dgx-spark/issues/1: two DGX Sparks over RoCE, `GPU Direct RDMA (DMABUF)
    # enabled for HCA 0/1`, and only [send] channels (GDR read is off by NCCL's default) in the excerpt.
    result = check(nccl_logs=["nccl_log__mark-ramsey-ri-vllm-dgx-spark-1.txt"])
    assert not [f for f in result.findings if f.kind == "no_gdr"]


def test_the_launchers_host_list_says_the_job_spans_two_nodes() -> None:
    # https://gist.github.com/cswinter/220e2360c8014e031186fecf9d79ba1b: `mpirun -H 10.73.0.52:1,10.73.0.15:1 -np 2`,
    # then one host's NCCL 2.3 lines: `Using internal Network Socket`. Two nodes over TCP sockets.
    result = check(nccl_logs=["nccl_log__site-gist.github.com-1.txt"])
    assert [(f.kind, f.severity.value) for f in result.findings] == [("socket_fallback", "crit")]
    assert launched_nodes("mpirun -N 8 -np 16 ./a") is None  # OpenMPI's -N is processes per node
    assert launched_nodes("srun -N 2 --ntasks-per-node=8 python t.py") == 2
    assert launched_nodes("torchrun --nnodes 1:4 train.py") is None  # elastic: a range, not a count
    assert launched_nodes("torchrun --nnodes=1 --nproc_per_node=8 train.py") == 1
