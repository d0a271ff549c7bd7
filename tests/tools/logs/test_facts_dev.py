"""Facts read by mechanism, not by wording (issue 31), each on the real development excerpt it was written for (the
excerpt's source is in its set's cases.jsonl and in the comment above its case): a rule's line under a traceback is
located at the user's frame, not at the library frame right above it, nor at the logging call its prefix names; the rank
a message names as its own (NCCL's communicator line, vLLM's `world_size=1 rank=0`, NCCL's and DDP's checks, a
monitored barrier's one missing rank); a learned guess's deciding line gives the exception and message a traceback's
line would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, diagnose_logs

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"


def diagnose(relative: str) -> DiagnoseLogsResult:
    path = LOGS / relative
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))


def of_category(result: DiagnoseLogsResult, category: str) -> list[LogFinding]:
    return [f for f in result.findings if f.category == category]


@pytest.mark.parametrize(("relative", "category", "facts"), [
    # https://github.com/resistzzz/Prompt4NR/issues/3 (Season0518, 2023-07-19): spawn's ProcessExitedException raised in
    # torch/multiprocessing/spawn.py; the user's frame is main-multigpu.py:422, the failing call stays `join`.
    ("round9/dev/process_exit__resistzzz-prompt4nr-3.log", "process_exit",
     {"location": "main-multigpu.py:422", "function": "join"}),
    # https://github.com/sail-sg/zero-bubble-pipeline-parallelism/issues/60 (zliu69, 2025-03-13): an NCCL WARN whose
    # prefix names net_socket.cc:488, then rank 9's traceback cut at Megatron's training.py:855.
    ("round9/dev/collective_mismatch__sail-sg-zero-bubble-pipeline-parallelism-60.log", "collective_mismatch",
     {"location": "/sharedata/<user>/code/zbpp_v010/megatron/training.py:855",
      "nccl_source": "transport/net_socket.cc:488"}),
])
def test_location_is_the_users_frame(relative: str, category: str, facts: dict[str, Any]) -> None:
    found = of_category(diagnose(relative), category)
    assert found, relative
    for key, value in facts.items():
        assert found[0].facts.get(key) == value, (key, found[0].facts)


@pytest.mark.parametrize(("relative", "category", "rank"), [
    # https://github.com/NVIDIA/nccl/issues/296 (MicaelCarvalho, 2020-03-02): "... at and around rank 39".
    ("wild/collective_mismatch__nccl-296.log", "collective_mismatch", 39),
    # https://github.com/NVIDIA/nccl/issues/214 (wavesj): four WARN lines, ranks 11, 15, 9, 13.
    ("wild/collective_mismatch__nccl-214.log", "collective_mismatch", 11),
    # https://github.com/kanishkg/stream-of-search/issues/5 (zijianh4): "but Rank 1 has 212 params".
    ("round9/dev/collective_mismatch__kanishkg-stream-of-search-5.log", "collective_mismatch", 1),
    # PyTorch docs, torch.distributed "Monitored Barrier": "Rank 1 failed to pass monitoredBarrier in 2000 ms".
    ("wild/nccl_timeout__pytorch-docs-monitored-barrier.log", "nccl_timeout", 1),
    # https://github.com/sgl-project/sglang/issues/3398 (joerong888): one process, `ncclCommInitRank ... rank 1
    # nranks 16`.
    ("wild/nccl_init_network__sglang-3398.log", "nccl_init_network", 1),
    # https://github.com/NVIDIA/nccl/issues/1537 (blegear, 2024-12-09): `comm 0x... rank 0 nranks 16`.
    ("wild/nccl_init_network__nccl-1537.log", "nccl_init_network", 0),
    # https://github.com/vllm-project/vllm/issues/18362 (viktor-haag): vLLM's `world_size=1 rank=0 local_rank=-1`.
    ("wild/nccl_init_network__vllm-18362.log", "nccl_init_network", 0),
])
def test_rank_the_log_names(relative: str, category: str, rank: int) -> None:
    found = of_category(diagnose(relative), category)
    assert any(rank in f.ranks for f in found), [(f.rule, f.ranks) for f in found]


def test_a_communicator_line_of_each_of_several_processes_names_no_own_rank() -> None:
    # https://github.com/NVIDIA/nccl/issues/214: the comm lines of ranks 1 and 7 (two processes) are no log's own rank;
    # the findings keep the ranks their own lines name.
    found = of_category(diagnose("wild/collective_mismatch__nccl-214.log"), "collective_mismatch")
    assert sorted(found[0].ranks) == [9, 11, 13, 15]


@pytest.mark.parametrize(("relative", "facts"), [
    # https://github.com/ZhengYinan-AIR/Diffusion-Planner/issues/65 (HerrSchnapps, 2025-08-04): the exception quoted in
    # prose, `"RuntimeError: Expected to have finished reduction ...`.
    ("round5/dev/collective_mismatch__zhengyinan-air-diffusion-planner-65.log",
     {"exception": "RuntimeError",
      "message": "Expected to have finished reduction in the prior iteration before starting a new one."}),
    # https://github.com/Megvii-BaseDetection/YOLOX/issues/885 (starsky68, 2021-11-08): the message without its type.
    ("round5/dev/collective_mismatch__megvii-basedetection-yolox-885.log",
     {"message": "Expected to have finished reduction in the prior iteration before starting a new one."}),
])
def test_learned_guess_reads_its_line_as_an_exception(relative: str, facts: dict[str, Any]) -> None:
    found = of_category(diagnose(relative), "collective_mismatch")
    assert found and found[0].facts.get("learned") is True
    for key, value in facts.items():
        assert found[0].facts.get(key) == value, (key, found[0].facts)
    if "exception" not in facts:
        assert "exception" not in found[0].facts  # no type printed, none made up
