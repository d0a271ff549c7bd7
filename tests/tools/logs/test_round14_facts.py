"""Facts added from round 14's and round 13's development parts (issue 31), each on the real excerpt it was written
for (source URLs in each folder's cases.jsonl): the step the training had reached above a failure that names none,
an exception raised in a DataLoader worker's dataset code as dataloader, the location where every frame is a
library's, a console script's shim not taken for the user's code, a native check's file:line from dmlc's message, and
an import chain's frames read in Python's order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs
from tools.logs.progress import ProgressReader

DATA = Path(__file__).resolve().parents[2] / "data" / "logs"


@pytest.mark.parametrize(("name", "category", "facts"), [
    # https://github.com/threestudio-project/threestudio/issues/369: tqdm's `4540/? [07:57` glued to the segfault.
    ("round13/dev/process_exit__threestudio-project-threestudio-369.log", "process_exit",
     {"step": 4540, "step_line": 1}),
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


def test_progress_needs_more_than_a_counter() -> None:
    progress = ProgressReader()
    progress.feed(1, b"save_step: 500")  # a config line: a step counter and nothing that shows progress
    progress.feed(2, b"iteration 271 | lm loss: 5.312 | lr: 1e-4")
    progress.feed(3, b"iteration 272 | lm loss: 5.298 | lr: 1e-4")
    assert progress.before(1) is None
    reached = progress.before(10)
    assert reached is not None and (reached.step, reached.line, reached.loss) == (272, 3, 5.298)
    earlier = progress.before(2)
    assert earlier is not None and earlier.step == 271
