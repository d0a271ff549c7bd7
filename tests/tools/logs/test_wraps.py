"""Line repair for hard-wrapped logs (tools/logs/wraps.py): real excerpts of tests/data/logs (sources in their
cases.jsonl), cut every N columns as a terminal's copy or a paste box does, read as the lines they were printed in;
logs whose longest lines are records of one kind are never joined."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs
from tools.logs.wraps import hard_wrap_width, rejoin_wrapped

DEV = DATA / "logs" / "round2" / "dev"
WILD = DATA / "logs" / "wild"


def _cut(text: str, width: int) -> str:
    return "".join(line[start:start + width] + "\n" for line in text.splitlines()
                   for start in range(0, max(len(line), 1), width))


def _diagnose(root: Path, name: str) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(root.resolve(),)))


@pytest.mark.parametrize("width", [80, 130])
@pytest.mark.parametrize("name", ["cuda_oom__qwen-916.log", "nccl_timeout__facebookresearch-dinov2-1.log",
                                  "nan_inf__megatron-deepspeed-396.log"])
def test_a_wrapped_log_reads_as_printed(tmp_path: Path, name: str, width: int) -> None:
    original = (DEV / name).read_text(encoding="utf-8")
    (tmp_path / name).write_text(_cut(original, width), encoding="utf-8")
    assert hard_wrap_width(_cut(original, width).encode()[:8192]) == width
    wrapped, printed = _diagnose(tmp_path, name), _diagnose(DEV, name)
    assert [(f.category, f.severity, f.facts) for f in wrapped.findings] == \
        [(f.category, f.severity, f.facts) for f in printed.findings]
    assert f"hard-wrapped at {width} columns" in wrapped.coverage[0].detail
    assert wrapped.coverage[0].status == "read"


@pytest.mark.parametrize("path", [
    DEV / "dataloader__udacity-p1-facial-keypoints-1.log",  # a notebook's autosave lines, the longest, between errors
    WILD / "nccl_init_network__nccl-398.log",  # NCCL ring lines of one length
    WILD / "process_exit__accelerate-1519.log",  # torchrun's failure summary, per rank
    DATA / "memory" / "summary__pytorch-35901.txt",  # torch.cuda.memory_summary(): a table, every row one width
    # An ERROR record and PyTorch's 119-character CUDA note ("... so the stacktrace below might be incorrect."),
    # each a whole sentence before one that starts another: two lines of one length by chance.
    WILD / "cuda_error__mineru-378.log",
])
def test_records_of_one_kind_are_not_a_wrap(path: Path) -> None:
    assert hard_wrap_width(path.read_bytes()[:8192]) is None


def test_rejoin_keeps_a_table_row_apart_and_joins_pieces() -> None:
    piece = "RuntimeError: CUDA out of memory. Tried to alloc"
    width = len(piece)
    text = f"{piece}\nate 20.00 MiB (GPU 0)\n{piece}\n{piece}\n".encode()
    assert rejoin_wrapped(text, width).decode().splitlines() == [
        piece + "ate 20.00 MiB (GPU 0)", piece, piece]


def test_a_paste_that_lost_the_cut_space_is_joined_with_one() -> None:
    # tests/data/logs/wild/nccl_timeout__vlm-r1-257.log: PyTorch's watchdog message wrapped at 116 columns; where a
    # cut fell on a space, GitHub stripped it and the piece is 115 long.
    path = WILD / "nccl_timeout__vlm-r1-257.log"
    assert hard_wrap_width(path.read_bytes()[:8192]) == 116
    first = rejoin_wrapped(path.read_bytes(), 116).decode().splitlines()[0]
    assert "triggered by another thread holding the GIL" in first
    assert "watchdog got stuck for 480 seconds" in first
