"""Mechanisms written from round 18's development part (issue 31), each on the real excerpt it was written for
(source URLs in tests/data/logs/round18/dev/cases.jsonl): ggml's CUDA check, a wrapper's CUDA enum without its prefix,
the GPU's memory running out in Julia's and Java's words, ONNX Runtime's errors (and an IPython header naming a class
without an Error suffix), a Java logger's name that is not an exception, an MPI launcher that could not start its
daemons, a policy's NaN standard deviation, and a tensor printed all NaN. The held-out part is never read here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.tools.logs.serious import serious_by_category
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs
from tools.logs.exceptions import parse_exception

DEV = Path(__file__).resolve().parents[2] / "data" / "logs" / "round18" / "dev"


def _serious(name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return serious_by_category(DEV / name)


@pytest.mark.parametrize(("name", "category", "rule", "facts"), [
    # PowerInfer#122: `CUDA error 222 at /py_lib/PowerInfer/ggml-cuda.cu:6466: the provided PTX was compiled with an
    # unsupported toolchain.`
    ("cuda_error__Tiiny-AI-PowerInfer-1.log", "cuda_error", "cuda_error",
     {"cuda_error_code": 222, "location": "/py_lib/PowerInfer/ggml-cuda.cu:6466",
      "error": "the provided PTX was compiled with an unsupported toolchain"}),
    # GrinGoldMiner#68: ManagedCuda's `ErrorIllegalAddress` in the miner's own report.
    ("cuda_error__mozkomor-GrinGoldMiner-1.log", "cuda_error", "cuda_error",
     {"cuda_error_name": "ErrorIllegalAddress"}),
    # CUDA.jl#2898: `ERROR: Out of GPU memory` above Julia's stack trace.
    ("cuda_oom__JuliaGPU-CUDA.jl-1.log", "cuda_oom", "device_alloc_failed",
     {"error": "Out of GPU memory", "location": "D:\\.julia\\packages\\CUDA\\Wfi8S\\lib\\cudadrv\\libcuda.jl:28",
      "function": "throw_api_error"}),  # where Julia's stack trace under it says it was raised, innermost first
    # deeplearning4j#9119: `cudaMalloc failed; Bytes: [1077940224]; Error code [2]; DEVICE [0]` in a Java exception,
    # under a WARN record whose logger name is no exception.
    ("cuda_oom__deeplearning4j-deeplearning4j-1.log", "cuda_oom", "device_alloc_failed",
     {"requested_bytes": 1077940224, "gpu": 0, "exception": "java.lang.RuntimeException"}),
    # sklearn-onnx#303: IPython's `InvalidArgument   Traceback (most recent call last)` through onnxruntime's session.
    ("inference__onnx-sklearn-onnx-1.log", "inference", "exception_inference_engine_frame",
     {"exception": "InvalidArgument"}),
    # torchpack#24: `ssh: Could not resolve hostname localhost:3`, then ORTE could not start its daemons.
    ("unclassified_error__zhijian-liu-torchpack-1.log", "unclassified_error", "mpi_launch_failed",
     {"host": "localhost:3", "error": "ssh: Could not resolve hostname localhost:3: Name or service not known"}),
    # unitree_rl_lab#24: `RuntimeError: normal expects all elements of std >= 0.0` sampling the policy.
    ("nan_inf__unitreerobotics-unitree_rl_lab-1.log", "nan_inf", "exception_nan_message",
     {"exception": "RuntimeError"}),
    # cryosparc-issues#142: pycuda's `MemoryError: cuMemAlloc failed: out of memory` (the driver API's allocation).
    ("cuda_oom__cryoem-uoft-cryosparc-issues-1.log", "cuda_oom", "device_alloc_failed",
     {"error": "cuMemAlloc failed: out of memory", "exception": "MemoryError"}),
    # athena#233: the shell's `killed`, retyped in lower case by the poster.
    ("process_exit__athena-team-athena-1.log", "process_exit", "death_signal", {"signal_number": 9}),
    # FluxML model-zoo#242: a 2x10 CuArray printed as rows of NaN after epoch 2.
    ("nan_inf__FluxML-model-zoo-1.log", "nan_inf", "nan_values_printed", {}),
])
def test_round18_mechanism(name: str, category: str, rule: str, facts: dict[str, Any]) -> None:
    found = _serious(name)
    assert category in found, found
    assert found[category][0] == rule
    for key, value in facts.items():
        assert found[category][1].get(key) == value, (key, found[category][1])
    assert set(found) == {category}, found  # and nothing else serious


def test_a_logger_name_after_its_level_is_not_an_exception() -> None:
    line = "WARN  org.deeplearning4j.nn.layers.convolution.ConvolutionLayer: CuDNN execution failed - falling back"
    assert parse_exception(line) is None
    assert parse_exception("java.lang.RuntimeException: cudaMalloc failed") == (
        "java.lang.RuntimeException", "cudaMalloc failed")
    # An exception class (suffixed) keeps its place after a level word: a record that quotes a raised error.
    assert parse_exception("WARNING torch.cuda.OutOfMemoryError: CUDA out of memory.") is not None


def test_c10ds_ipv6_lookup_warning_is_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text(
        "[W socket.cpp:601] [c10d] The IPv6 network addresses of (node1, 29500) cannot be retrieved (gai error: -3 - "
        "Temporary failure in name resolution).\nstep 10 loss 2.31\n")
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["job.log"]), ToolContext(roots=(tmp_path,)))
    assert [(f.rule, f.severity) for f in result.findings] == [("store_ipv6_lookup", "info")]


def test_rows_of_minus_inf_are_a_mask_not_nan(tmp_path: Path) -> None:
    (tmp_path / "mask.log").write_text("tensor([[0., -inf, -inf],\n        [0., 0., -inf]])\nstep 1 loss 2.3\n")
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["mask.log"]), ToolContext(roots=(tmp_path,)))
    assert not [f for f in result.findings if f.severity != "info"]


@pytest.mark.parametrize(("line", "category", "rule", "facts"), [
    # Triton's launcher quoting the CUDA runtime's cudaErrorInvalidKernelImage string.
    ("RuntimeError: Triton Error [CUDA]: device kernel image is invalid", "cuda_error", "cuda_error_string",
     {"error": "device kernel image is invalid"}),
    # OpenCV's assertion on an empty image: cv2.imread returned nothing for a sample (a bare final line).
    ("cv2.error: OpenCV(4.5.1) /tmp/opencv/modules/imgproc/src/color.cpp:182: error: (-215:Assertion failed) "
     "!_src.empty() in function 'cvtColor'", "dataloader", "exception_dataloader_image_empty", {}),
    # The loader's pin-memory thread re-raising; TensorFlow's record reader on a truncated file.
    ("RuntimeError: Caught RuntimeError in pin memory thread for device 0.", "dataloader",
     "exception_dataloader_worker_caught", {}),
    ("tensorflow.python.framework.errors_impl.DataLossError: truncated record at 123456", "dataloader",
     "exception_dataloader_records_corrupt", {}),
    # env:// rendezvous run without a launcher.
    ("ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
     "expected, but not set", "nccl_init_network", "exception_distributed_env_missing", {"variable": "MASTER_ADDR"}),
    # Serving stacks that did not come up or shed load: vLLM's engine process, TGI's weights download, Ollama's
    # memory check, Ray Serve's queue; torch.compile on a Python it does not support.
    ("RuntimeError: Engine process failed to start. See stack trace for the root cause.", "inference",
     "exception_inference_engine_failed", {}),
    ("2024-06-01T10:00:00.000000Z ERROR download: text_generation_launcher: Download encountered an error:",
     "inference", "exception_inference_server_start", {}),
    ("Error: model requires more system memory (10.0 GiB) than is available (4.2 GiB)", "inference",
     "exception_inference_model_load", {}),
    ("ray.serve.exceptions.BackPressureError: Request dropped due to backpressure (num_queued_requests=100, "
     "max_queued_requests=100).", "inference", "exception_inference_overloaded", {}),
    ("RuntimeError: Dynamo is not supported on Python 3.12+", "compile", "exception_compile_toolchain_missing", {}),
    # TensorRT-LLM's logger at error level with a message no taxonomy entry knows: the engine's, by its tag.
    ("[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp (/src/tensorrt_llm/runtime/worldConfig.cpp:97)",
     "inference", "exception_inference_engine_record", {}),
])
def test_a_line_by_its_mechanism(tmp_path: Path, line: str, category: str, rule: str, facts: dict[str, Any]) -> None:
    (tmp_path / "job.log").write_text(line + "\n")
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["job.log"]), ToolContext(roots=(tmp_path,)))
    [found] = [f for f in result.findings if f.severity != "info"]
    assert (found.category, found.rule) == (category, rule)
    assert {k: found.facts.get(k) for k in facts} == facts


def test_an_engine_tagged_line_the_taxonomy_knows_keeps_its_entry() -> None:
    # round 5's triton-cli#59: `[TensorRT-LLM][ERROR] 6: The engine plan file is not compatible with this version of
    # TensorRT`: the model-load entry (with its versions), not the engine's tag.
    root = DEV.parents[1] / "round5" / "dev"
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["inference__triton-inference-server-triton-cli-59.log"]),
                       ToolContext(roots=(root.resolve(),)))
    assert "exception_inference_engine_record" not in {f.rule for f in result.findings}
    assert "exception_inference_model_load" in {f.rule for f in result.findings}


def test_every_ranks_inf_grad_norm_the_fp16_scaler_skipped_is_its_warm_up() -> None:
    # https://github.com/mlcommons/training_results_v0.5/blob/c71f2e7c4b11ec7ab89eb4d8ceaadaae8529fff7/v0.5.0/nvidia/
    # submission/results/dgx1_ngc18.11_pytorch/gnmt/result_0.txt (benign round 20, development): 8 ranks print
    # `Gradient norm: inf`, then `Skipped batch, new scale: 4096.0` .. 1024.0: three skips each, the loss falling.
    root = DEV.parents[1] / "benign_round20" / "dev"
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["benign__mlcommons-training_results_v0.5-3.log"]),
                       ToolContext(roots=(root.resolve(),)))
    by_rule = {f.rule: f for f in result.findings}
    skip, norm = by_rule["overflow_skip"], by_rule["metric_nonfinite"]
    assert skip.severity == "info" and skip.facts["loss_scale"] == 1024.0 and len(skip.ranks) == 8
    assert norm.severity == "info" and norm.facts["scaler_skip"] is True


def test_an_exception_that_restates_the_error_line_above_its_traceback_is_that_lines_failure() -> None:
    # https://github.com/megvii-research/MEMD/issues/1: ONNX Runtime logs `[E:onnxruntime:...] Non-zero status code
    # returned while running Cast node ... CUDA error cudaErrorNoKernelImageForDevice`, then raises `Fail:
    # [ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Cast node.`: one failure, a CUDA
    # error (the image has no kernel for this GPU), the exception's type and frames joined to it.
    found = _serious("cuda_error__megvii-research-MEMD-1.log")
    assert set(found) == {"cuda_error"}, found
    rule, facts = found["cuda_error"]
    assert facts["exception"] == "onnxruntime.capi.onnxruntime_pybind11_state.Fail"
    assert facts["location"] == "/home/xsy/python/MEMD/./memd/utils/onnx_model.py:32"


def test_a_final_exception_in_markdown_bold_keeps_its_traceback() -> None:
    # HRNet-Semantic-Segmentation#160: the poster bolded the last line, `**RuntimeError: Address already in use**`;
    # the bold is the poster's, the traceback above it still places the failure.
    rule, facts = _serious("nccl_init_network__HRNet-HRNet-Semantic-Segmentation-1.log")["nccl_init_network"]
    assert (facts["exception"], facts["message"], facts["location"]) == (
        "RuntimeError", "Address already in use", "tools/train.py:99")
    assert parse_exception("**RuntimeError: Address already in use**") == ("RuntimeError", "Address already in use")


def test_a_julia_frame_naming_the_cuda_error_type_is_no_second_error() -> None:
    # Enzyme.jl#221: every CUDA.jl stack trace starts `[1] throw_api_error(res::CUDA.cudaError_enum)`: the type's name,
    # not a value; the one failure is the illegal address above it.
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["cuda_error__EnzymeAD-Enzyme.jl-1.log"]),
                       ToolContext(roots=(DEV.resolve(),)))
    assert [(f.category, f.facts.get("error")) for f in result.findings] == [
        ("cuda_error", "an illegal memory access was encountered")]
