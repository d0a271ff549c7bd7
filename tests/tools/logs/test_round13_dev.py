"""The mechanisms added for round 13's development part (issue 31), each on the real excerpt it was written for
(tests/data/logs/round13/dev; each excerpt's source URL is in its cases.jsonl and in the comment above its case): XLA's
GPU compile failures (ptxas crashing on a fusion, the autotuner's failed compile) are compile, a tf.data decoder node
and an exception raised inside Pillow's decoders are dataloader, vLLM's unregistered model architecture is inference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs

ROUND13 = Path(__file__).resolve().parents[2] / "data" / "logs" / "round13" / "dev"


@pytest.mark.parametrize(("name", "category", "rule", "facts"), [
    # https://github.com/MIT-REALM/gcbfplus/issues/11: `ptxas exited with non-zero error code 139` on a gemm fusion.
    ("compile__MIT-REALM-gcbfplus-11.log", "compile", "xla_gpu_compile",
     {"exitcode": 139, "op": "gemm_fusion_dot.610", "backend": "XLA"}),
    # https://github.com/google-deepmind/mujoco_playground/issues/113: glog's F line from XLA's gemm fusion autotuner.
    ("compile__google-deepmind-mujoco_playground-113.log", "compile", "xla_gpu_compile",
     {"error": "Non-OK-status: executable.status()"}),
    # https://github.com/aniketmaurya/chitra/issues/152: `[[{{node decode_image/DecodeImage}}]]` under tf.data.
    ("dataloader__aniketmaurya-chitra-152.log", "dataloader", "tf_data_decode", {"op": "decode_image/DecodeImage"}),
    # https://github.com/RjDuan/AdvDrop/issues/5: struct.error raised in PIL's PNG plugin (a truncated image).
    ("dataloader__RjDuan-AdvDrop-5.log", "dataloader", "exception_dataloader_image_decode_frame",
     {"exception": "struct.error"}),
    # https://github.com/MiniMax-AI/MiniMax-M1/issues/21: vLLM's "is not a registered model in the Transformers
    # library".
    ("inference__MiniMax-AI-MiniMax-M1-21.log", "inference", "exception_inference_model_load",
     {"exception": "ValueError"}),
])
def test_round13_mechanism(name: str, category: str, rule: str, facts: dict[str, Any]) -> None:
    path = ROUND13 / name
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(path.parent.resolve(),)))
    found = [f for f in result.findings if f.severity != "info"]
    assert found and (found[0].category, found[0].rule) == (category, rule), [(f.category, f.rule) for f in found]
    assert {k: found[0].facts.get(k) for k in facts} == facts
