"""Facts added from round 14's, 13's and 5's development parts (issue 31), each on the real excerpt it was written
for (source URLs in each folder's cases.jsonl): an exception raised in a DataLoader worker's dataset code as
dataloader, the location where every frame is a library's, a console script's shim not taken for the user's code, a
native check's file:line from dmlc's message, and an import chain's frames read in Python's order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs

DATA = Path(__file__).resolve().parents[2] / "data" / "logs"


@pytest.mark.parametrize(("name", "category", "facts"), [
    # https://github.com/bioinsilico/rcsb-embedding-search/issues/3: KeyError in a worker's dataset code.
    ("round14/dev/dataloader__bioinsilico-rcsb-embedding-search-3.log", "dataloader",
     {"exception": "KeyError", "location": "index.pyx:134"}),
    # https://github.com/rusty1s/pytorch_cluster/issues/186: TorchScript's frames, all in site-packages.
    ("round14/dev/compile__rusty1s-pytorch_cluster-186.log", "compile",
     {"location": "/home/<user>/anaconda3/envs/diffdock/lib/python3.9/site-packages/torch_cluster/radius.py:72"}),
    # https://github.com/deepmodeling/dpgen/issues/434: bin/dpgen is pip's shim; the raise is in Dispatcher.py.
    ("round14/dev/unclassified_error__deepmodeling-dpgen-434.log", "unclassified_error",
     {"location": "/home/<user>/apps/dp-kit122/lib/python3.8/site-packages/dpgen/dispatcher/Dispatcher.py:216"}),
    # https://github.com/dmlc/dgl/issues/6868: `[02:00:36] /opt/dgl/src/rpc/rpc.cc:484: Check failed`.
    ("round14/dev/unclassified_error__dmlc-dgl-6868.log", "unclassified_error",
     {"location": "/opt/dgl/src/rpc/rpc.cc:484"}),
    # https://github.com/huggingface/autotrain-advanced/issues/292: an import chain's innermost `<module>` frame.
    ("round5/dev/unclassified_error__huggingface-autotrain-advanced-292.log", "unclassified_error",
     {"location": "/app/env/lib/python3.9/site-packages/flash_attn/flash_attn_interface.py:8"}),
    # https://github.com/quic/aimet/issues/1685: the worker's Original Traceback cut before its final line.
    ("round13/dev/dataloader__qualcomm-aimet-1685.log", "dataloader",
     {"location": "/home/<user>/aimet_testing/aimet_1_22_2/Examples/torch/utils/image_net_data_loader.py:155"}),
])
def test_fact_mechanism(name: str, category: str, facts: dict[str, Any]) -> None:
    path = DATA / name
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]),
                       ToolContext(roots=(path.parent.resolve(),)))
    found = [f for f in result.findings if f.category == category and f.severity != "info"]
    assert found, [(f.category, f.severity) for f in result.findings]
    for name_, value in facts.items():
        assert found[0].facts.get(name_) == value, (name_, found[0].facts)

