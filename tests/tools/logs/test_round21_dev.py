"""Mechanisms written from round 21's development part (issue 31), each on the real excerpt it was written for
(source URLs in tests/data/logs/round21/dev/cases.jsonl): Ray's task error that names the type the task raised, pip's
build that failed at its metadata step, UCX that could not reach its peer, TensorFlow's stream operations and image
decoders, AWS Neuron's compiler, ptxas under XLA, ROCm's math libraries by their tag, a GPU runtime that could not
be loaded (the program goes on without the GPU), a serving engine's port already taken, a loss named by its
function, and a log console's table copied as text. The held-out part is never read here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.tools.logs.serious import serious_by_category
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs

DEV = Path(__file__).resolve().parents[2] / "data" / "logs" / "round21" / "dev"


@pytest.mark.parametrize(("name", "category", "rule", "facts"), [
    # EasyR1#9: verl's workers re-raised through Ray as `ray.exceptions.RayTaskError(OutOfMemoryError)`: the type in
    # parentheses is what the task raised.
    ("cuda_oom__RootedTime-EasyR1-1.log", "cuda_oom", "exception_oom_type",
     {"exception": "ray.exceptions.RayTaskError(OutOfMemoryError)"}),
    # open-unlearning#50: pip's `× python setup.py egg_info did not run successfully` for flash-attn (its setup.py ran
    # nvcc -V under a CUDA_HOME without it).
    ("compile__locuslab-open-unlearning-1.log", "compile", "native_build_error",
     {"error": "python setup.py egg_info did not run successfully"}),
    # NeMo-Aligner#541: UCX's connect to a link-local address refused, then a segfault (its consequence).
    ("nccl_init_network__NVIDIA-NeMo-Aligner-1.log", "nccl_init_network", "ucx_connect_failed",
     {"host": "169.254.4.6", "port": 52595, "transport": "UCX",
      "error": "connect(fd=168, dest_addr=169.254.4.6:52595) failed: Connection refused"}),
    # prosit#65: TensorFlow's `Failed to call ThenRnnForward` (cuDNN's RNN on the GPU stream).
    ("cuda_error__kusterlab-prosit-1.log", "cuda_error", "exception_cuda_error_message",
     {"exception": "tensorflow.python.framework.errors_impl.InternalError"}),
    # pix2pix-tensorflow#72: DecodeJpeg's `Invalid JPEG data`.
    ("dataloader__affinelayer-pix2pix-tensorflow-1.log", "dataloader", "exception_dataloader_image_corrupt",
     {"exception": "tensorflow.python.framework.errors_impl.InvalidArgumentError"}),
    # aws-neuron-samples#94 and nki-samples#24: the Neuron graph compiler, as a failed command and in its own words.
    ("compile__aws-neuron-aws-neuron-samples-1.log", "compile", "exception_compile_build_command",
     {"exitcode": 70, "exception": "subprocess.CalledProcessError"}),
    ("compile__aws-neuron-nki-samples-1.log", "compile", "native_build_error", {}),
    # jax-windows-builder#19: XLA's fatal record of ptxas failing, whose `error code -1` is ptxas', not a signal.
    ("compile__cloudhan-jax-windows-builder-1.log", "compile", "native_build_error", {"tool": "ptxas"}),
    # rocBLAS#1267, AMDMIGraphX#3517: `rocBLAS error: Cannot read .../TensileLibrary.dat` (no kernels for this gfx).
    ("cuda_error__ROCm-rocBLAS-1.log", "cuda_error", "exception_rocm_library_record", {}),
    ("cuda_error__ROCm-AMDMIGraphX-1.log", "cuda_error", "exception_rocm_library_record", {"gpu_arch": "gfx1201"}),
    # SecureAI-Tools#103 (Ollama's cudart), Qwen3-Reranker-0.6B#2 (vLLM with no platform): the GPU runtime that did
    # not load, at info and warning level.
    ("cuda_error__SecureAI-Tools-SecureAI-Tools-1.log", "cuda_error", "gpu_runtime_unavailable",
     {"error": "cudart init failure: 100", "cuda_error_code": 100}),
    ("cuda_error__dengcao-Qwen3-Reranker-0.6B-1.log", "cuda_error", "gpu_runtime_unavailable",
     {"error": "No platform detected, vLLM is running on UnspecifiedPlatform"}),
    # vlm_qwen3's committed vllm_server.log: the API server's port taken (Python's OSError, not the c10d store's).
    ("inference__JerryMouseZ-vlm_qwen3-1.log", "inference", "exception_inference_server_port",
     {"exception": "OSError", "error": "OSError: [Errno 98] Address already in use"}),
    # ssd-sign's committed train.log: MXNet's `Train-SmoothL1=nan`.
    ("nan_inf__BingzheWu-ssd-sign-1.log", "nan_inf", "metric_nonfinite", {"field": "Train-SmoothL1", "loss": "nan"}),
])
def test_round21_mechanism(name: str, category: str, rule: str, facts: dict[str, Any]) -> None:
    found = serious_by_category(DEV / name)
    assert category in found, found
    assert found[category][0] == rule
    for key, value in facts.items():
        assert found[category][1].get(key) == value, (key, found[category][1])
    assert set(found) == {category}, found  # and nothing else serious


def test_onnx_runtime_without_its_cuda_provider_is_the_gpu_runtime() -> None:
    # facefusion#294 (labelled inference): ONNX Runtime could not load CUDA and runs on its CPU provider; the finding
    # is the runtime that did not load, whichever engine noticed it.
    found = serious_by_category(DEV / "inference__facefusion-facefusion-1.log")
    assert found["cuda_error"][0] == "gpu_runtime_unavailable"


def test_a_console_tables_copy_keeps_each_ranks_line() -> None:
    # litData#340: CloudWatch's `  | 2024-08-23T22:22:58.879Z | [2]: ... rank : 2 (local_rank: 2) exitcode : -6`.
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["nccl_timeout__Lightning-AI-litData-1.log"]),
                       ToolContext(roots=(DEV.resolve(),)))
    exit_finding = next(f for f in result.findings if f.category == "process_exit")
    assert exit_finding.ranks == [2, 3, 4, 5, 6, 7] and exit_finding.facts["signal_number"] == 6


def test_a_list_of_words_is_data_not_a_message() -> None:
    # udacity/deep-learning-v2-pytorch (benign round 22, development): a word2vec notebook printing nearest words,
    # `war | military, forces, troops, killed, soviet`, is no process that was killed.
    root = DEV.parents[1] / "benign_round22" / "dev"
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["benign__udacity-deep-learning-v2-pytorch-1.log"]),
                       ToolContext(roots=(root.resolve(),)))
    assert not [f for f in result.findings if f.severity != "info"]
