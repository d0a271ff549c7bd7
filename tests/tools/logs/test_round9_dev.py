"""The mechanisms added for round 9's development part (issue 31), each on the real excerpt it was written for
(tests/data/logs/round9/dev; each excerpt's source URL is in its cases.jsonl and in the comment above its case):
building native code is compile (a C++/CUDA extension's build, ptxas, a TensorRT engine build), allocation failures told
by libraries and by the CUDA runtime's code 2 are cuda_oom, a DataLoader worker's exception and a loader that ran out of
retries are dataloader, Intel's XPU runtime is cuda_error, NCCL's size disagreement is collective_mismatch, a serving
router's transport error is inference; the facts read where they are printed (a cut traceback under a failure, a spawned
child's index, frames pasted innermost first, a padded terminal copy, a `total_step` counter, an amdgpu ring timeout's
reset lines); and one failure is not reported twice (a CUDA OOM's async note, an exit status 1 after the OOM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, diagnose_logs
from tools.logs.wraps import hard_wrap_width

ROUND9 = Path(__file__).resolve().parents[2] / "data" / "logs" / "round9" / "dev"


def diagnose(name: str) -> DiagnoseLogsResult:
    path = ROUND9 / name
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))


def serious(result: DiagnoseLogsResult) -> list[LogFinding]:
    return [f for f in result.findings if f.severity != "info"]


def has_fact(found: list[LogFinding], key: str, value: Any) -> bool:
    return any(f.facts.get(key) == value for f in found)


@pytest.mark.parametrize(("name", "category", "facts"), [
    # https://github.com/mapillary/inplace_abn/issues/245: `nvcc fatal` from a JIT extension build, ninja's
    # CalledProcessError chained under the training script's frames (native_build_error, compile_build_command).
    ("compile__mapillary-inplace_abn-245.log", "compile",
     {"tool": "nvcc", "exception": "subprocess.CalledProcessError",
      "error": "nvcc fatal   : Unsupported NVHPC compiler found. nvc++ is the only NVHPC compiler that is supported."}),
    # https://github.com/krrish94/chamferdist/issues/11: pip's indented build traceback ending in PyTorch's
    # "Error compiling objects for extension" (compile_native_extension).
    ("compile__krrish94-chamferdist-11.log", "compile",
     {"exception": "RuntimeError", "error": "RuntimeError: Error compiling objects for extension"}),
    # https://github.com/PRONTOLab/GB-25/issues/7: ptxas' `file.ptx, line 5; fatal : ...` (native_build_error).
    ("compile__prontolab-gb-25-7.log", "compile",
     {"tool": "ptxas", "error": "fatal   : Unsupported .version 8.6; current version is '8.4'"}),
    # https://github.com/RT-DETRs/RT-DETRv4/issues/18: trtexec's ONNX parse of a GridSample node falls back to a plugin
    # that does not exist; the node dump and the parser's assertion above "Failed to create engine".
    ("compile__rt-detrs-rt-detrv4-18.log", "compile",
     {"backend": "TensorRT", "op": "GridSample", "message": "Failed to create engine from model or file.",
      "error": 'Assertion failed: creator && "Plugin not found, are the plugin name, version, and namespace '
               'correct?"'}),
    # https://github.com/google/flax/issues/3376: XLA's cuBLAS handle "resource allocation failed" and cuDNN's
    # CUDNN_STATUS_ALLOC_FAILED (device_alloc_failed).
    ("cuda_oom__google-flax-3376.log", "cuda_oom",
     {"backend": "xla", "error": "failed to create cublas handle: the resource allocation failed",
      "message": "custom call 'xla.gpu.conv.forward' failed: CUDNN_STATUS_ALLOC_FAILED"}),
    # https://github.com/exo-explore/exo/issues/101: tinygrad's "CUDA Error 2, out of memory" (code 2 is the
    # allocation failure in the runtime and the driver API).
    ("cuda_oom__exo-explore-exo-101.log", "cuda_oom", {"error": "CUDA Error 2, out of memory"}),
    # https://github.com/google-research/jax3d/issues/131: the driver's pinned host allocation that failed.
    ("cuda_oom__google-research-jax3d-131.log", "cuda_oom",
     {"requested_bytes": 17179869184, "memory": "host",
      "error": "failed to alloc 17179869184 bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory"}),
    # https://github.com/zylo117/Yet-Another-EfficientDet-Pytorch/issues/422: `cv2.error: Caught error in DataLoader
    # worker process 11.` (a module-level `error` class), its original traceback not in the excerpt.
    ("dataloader__zylo117-yet-another-efficientdet-pytorch-422.log", "dataloader",
     {"exception": "cv2.error", "worker": 11, "location": "train.py:216"}),
    # https://github.com/starVLA/starVLA/issues/138: decord failures retried by the dataset, then "All 10 attempts
    # failed for index 177353" and its "Last error:", interleaved with a traceback cut before its final line.
    ("dataloader__starvla-starvla-138.log", "dataloader",
     {"message": "All 10 attempts failed for index 177353", "attempts": 10,
      "error": "ERROR cannot find video stream with wanted index: -1",
      "location": "/home/ubuntu/VLA-Builder/starVLA/starVLA/training/train_starvla.py:503"}),
    # https://github.com/intel/intel-extension-for-pytorch/issues/780: the Unified Runtime's DEVICE_LOST on an Intel
    # XPU; the frames were pasted with the failing call first (the `<module>` frame last).
    ("cuda_error__intel-intel-extension-for-pytorch-780.log", "cuda_error",
     {"error_code": "UR_RESULT_ERROR_DEVICE_LOST", "location": "...py/nightingale/server.py:49"}),
    # https://github.com/sail-sg/zero-bubble-pipeline-parallelism/issues/60: NCCL's "message truncated : receiving 4
    # bytes instead of 2", then rank 9's traceback cut at the paste's edge.
    ("collective_mismatch__sail-sg-zero-bubble-pipeline-parallelism-60.log", "collective_mismatch",
     {"backend": "NCCL", "host": "<host>", "received_bytes": 4, "expected_bytes": 2,
      "error": "message truncated : receiving 4 bytes instead of 2", "function": "train"}),
    # https://github.com/predibase/lorax/issues/305: LoRAX's router losing its shard while warming up the model.
    ("inference__predibase-lorax-305.log", "inference",
     {"error": "Server error: transport error", "phase": "warmup", "location": "router/client/src/lib.rs:34"}),
    # https://github.com/openai/consistency_models/issues/46: NCCL's "Last error:" is a CUDA peer-access failure: the
    # P2P transport could not be set up.
    ("nccl_init_network__openai-consistency-models-46.log", "nccl_init_network",
     {"backend": "NCCL", "transport": "P2P",
      "error": "Cuda failure 'peer access is not supported between these two devices'"}),
    # https://github.com/ROCm/xformers/issues/14: amdgpu's ring timeout, the reset of the device it names, VRAM lost.
    ("gpu_hardware__rocm-xformers-14.log", "gpu_hardware",
     {"pci": "0000:2b:00.0", "message": "VRAM is lost due to GPU reset!", "signaled_seq": 2216,
      "error": "*ERROR* ring page1 timeout, signaled seq=2216, emitted seq=2218"}),
])
def test_round9_families_and_their_facts(name: str, category: str, facts: dict[str, Any]) -> None:
    result = diagnose(name)
    found = [f for f in serious(result) if f.category == category]
    assert found, [(f.category, f.severity, f.rule) for f in result.findings]
    assert not [f for f in serious(result) if f.category != category], [(f.category, f.rule) for f in serious(result)]
    assert not [f for f in found if f.rule == "learned_fallback"]  # the rules decided, not the model's guess
    for key, value in facts.items():
        assert has_fact(found, key, value), (key, [f.facts for f in found])


def test_a_cut_traceback_lends_its_rank_to_the_failure_above_it() -> None:
    # zero-bubble-pipeline-parallelism#60 (above): the NCCL line has no rank; the `[rank9]:` traceback under it has.
    found = [f for f in serious(diagnose("collective_mismatch__sail-sg-zero-bubble-pipeline-parallelism-60.log"))
             if f.category == "collective_mismatch"]
    assert [f.ranks for f in found] == [[9]]


def test_a_spawned_childs_traceback_is_that_ranks() -> None:
    # https://github.com/visinf/da-sac/issues/12: torch.multiprocessing.spawn's "-- Process 1 terminated with the
    # following error:" above an illegal memory access.
    found = [f for f in serious(diagnose("cuda_error__visinf-da-sac-12.log")) if f.category == "cuda_error"]
    assert found and all(f.ranks == [1] for f in found)


def test_lines_padded_to_the_terminals_width_are_not_a_hard_wrap() -> None:
    # https://github.com/kanishkg/stream-of-search/issues/5: every line padded with blanks to 250 columns; read as
    # printed, DDP's cross-rank check is the reducer family (not the learned fallback's guess on joined lines).
    path = ROUND9 / "collective_mismatch__kanishkg-stream-of-search-5.log"
    assert hard_wrap_width(path.read_bytes()) is None
    found = [f for f in serious(diagnose(path.name)) if f.category == "collective_mismatch"]
    assert found and found[0].rule == "exception_ddp_reducer" and found[0].facts["exception"] == "RuntimeError"


def test_a_step_counter_named_with_a_prefix() -> None:
    # https://github.com/auroua/InsightFace_TF/issues/99: `epoch 0, total_step 90260, total loss is nan`.
    found = [f for f in serious(diagnose("nan_inf__auroua-insightface_tf-99.log")) if f.category == "nan_inf"]
    assert has_fact(found, "step", 90260)


def test_the_mps_allocators_budget_is_its_total() -> None:
    # https://github.com/mattmireles/gemma-tuner-multimodal/issues/18: "MPS backend out of memory (MPS allocated:
    # 9.48 GiB, other allocations: 480.00 KiB, max allowed: 9.47 GiB)".
    found = [f for f in serious(diagnose("cuda_oom__mattmireles-gemma-tuner-multimodal-18.log"))
             if f.category == "cuda_oom"]
    assert has_fact(found, "total_bytes", int(9.47 * 2**30))


@pytest.mark.parametrize(("name", "folded"), [
    # https://github.com/GRAPH-0/GraphGDP/issues/1 and https://github.com/zergtant/pytorch-handbook/issues/132:
    # "CUDA error: out of memory" and PyTorch's "CUDA kernel errors might be asynchronously reported" under it.
    ("cuda_oom__graph-0-graphgdp-1.log", "cuda_error"),
    ("cuda_oom__zergtant-pytorch-handbook-132.log", "cuda_error"),
    # https://github.com/mattmireles/gemma-tuner-multimodal/issues/18: the shell's exit status 1 after the MPS OOM;
    # https://github.com/stepfun-ai/Step-Video-T2V/issues/8: torchrun's `exitcode: 1` for the rank that hit the OOM.
    ("cuda_oom__mattmireles-gemma-tuner-multimodal-18.log", "process_exit"),
    ("cuda_oom__stepfun-ai-step-video-t2v-8.log", "process_exit"),
])
def test_one_failure_is_not_reported_twice(name: str, folded: str) -> None:
    result = diagnose(name)
    assert [f.category for f in serious(result)] == ["cuda_oom"]
    assert [f for f in result.findings if f.category == folded and f.facts.get("consequence") is True]


def test_retried_attempts_are_quiet_until_the_loader_gives_up() -> None:
    # starVLA#138 (above): each "Attempt N/10 failed ... ERROR cannot find video stream" is a retry, not a finding of
    # its own: one dataloader finding, the verdict's.
    found = [f for f in serious(diagnose("dataloader__starvla-starvla-138.log"))]
    assert [f.rule for f in found] == ["sample_retries_exhausted"]


@pytest.mark.parametrize(("name", "facts"), [
    # https://github.com/JindongJiang/WeightedLoss_Convolutional_Pose_Machines_PyTorch/issues/2: `Loss: nan`, then
    # numpy's "range parameter must be finite." from tensorboardX's histogram of the NaN weights.
    ("nan_inf__jindongjiang-weightedloss_convolutional_pose_machines_pytorch-2.log",
     {"exception": "ValueError", "error": "ValueError: range parameter must be finite.",
      "location": "cpm_train.py:126"}),
    # https://github.com/stefan-jansen/machine-learning-for-trading/issues/252: Keras' `loss: nan`, then IPython 8's
    # `InvalidArgumentError   Traceback` with its `Input In [25], in <cell line: 1>()` frame.
    ("nan_inf__stefan-jansen-machine-learning-for-trading-252.log",
     {"exception": "InvalidArgumentError", "location": "Input In [25]:1"}),
])
def test_an_unknown_exception_right_under_a_failure_is_how_it_surfaced(name: str, facts: dict[str, Any]) -> None:
    result = diagnose(name)
    assert [f.category for f in serious(result)] == ["nan_inf"]  # no unclassified_error beside it
    found = serious(result)
    for key, value in facts.items():
        assert has_fact(found, key, value), (key, [f.facts for f in found])
