"""Issue 31's GPU hardware forms (an Xid wherever it is printed, NVLink links down) and the facts of CUDA errors and
OOMs by the message's form (tools/logs/cuda_facts.py), on real excerpts (tests/data/logs/round2/dev, labels and
sources in its cases.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.cuda_facts import cuda_error_text
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, classify, diagnose_logs

DEV = DATA / "logs" / "round2" / "dev"


def diagnose(name: str, root: Path = DEV) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(root.resolve(),)))


def finding(result: DiagnoseLogsResult, category: str) -> LogFinding:
    found = [f for f in result.findings if f.category == category]
    assert found, [(f.category, f.rule, f.severity) for f in result.findings]
    return found[0]


@pytest.mark.parametrize(("name", "rule", "severity", "facts"), [
    # GKE's node condition, as kubectl shows it: XidCriticalError True with the Xid map {"31":true}.
    ("gpu_hardware__googlecloudplatform-container-engine-accelerators-1.log", "xid_reported", "warn", {"xid": 31}),
    # dcgm-exporter's Prometheus series: the Xid in err_code, its message in err_msg.
    ("gpu_hardware__nvidia-dcgm-1.log", "xid_reported", "warn",
     {"xid": 45,
      "error": "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda"}),
    # The active-Xid series: the Xid in the xid label, the GPU in gpu (its value, 1, is a count).
    ("gpu_hardware__nvidia-dcgm-exporter-1.log", "xid_reported", "warn", {"xid": 42, "gpu": 0}),
    # The Kubernetes device plugin: 'XidCriticalError: Xid=69 on Device=GPU-...'.
    ("gpu_hardware__nvidia-k8s-device-plugin-1.log", "xid_reported", "warn",
     {"xid": 69, "gpu_uuid": "GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8"}),
    # nvidia-smi nvlink -s: two links <inactive>; the GPU from the header line above them.
    ("gpu_hardware__azure-azhpc-diagnostics-1.log", "nvlink_inactive", "warn",
     {"error": "NVLink inactive", "nvlink": 3, "gpu": 3}),
    # The kernel's Xid 13: the error in words, not the register dump printed first.
    ("gpu_hardware__3dem-relion-1.log", "xid", "warn",
     {"xid": 13, "pci": "0000:41:00",
      "error": "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Illegal Instruction Encoding"}),
    # nvidia-smi cannot get the GPU's handle: crit, with the error it names.
    ("gpu_hardware__rwth-i6-returnn-1.log", "gpu_init_failed", "crit",
     {"pci": "0000:03:00.0", "error": "Unknown Error"}),
])
def test_gpu_hardware_forms(name: str, rule: str, severity: str, facts: dict[str, Any]) -> None:
    found = finding(diagnose(name), "gpu_hardware")
    assert (found.rule, found.severity) == (rule, severity)
    for key, value in facts.items():
        assert found.facts.get(key) == value, (key, found.facts)


@pytest.mark.parametrize("line", [
    b'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-b9f9",device="nvidia0"} 0',  # the gauge at 0: no Xid
    b"# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified time window.",
    b"  XidCriticalError     False   Mon, 23 Jun 2025 18:45:43 +0000   NoXidCriticalError",
    b"         Link 0: 25.781 GB/s",
])
def test_healthy_gpu_lines_are_quiet(line: bytes) -> None:
    classified = classify(line)
    assert classified is None or classified[0].category != "gpu_hardware", classified


@pytest.mark.parametrize(("name", "category", "facts"), [
    # XLA's driver-API error in a kernel launch (was not recalled: no rule knew CUDA_ERROR_ILLEGAL_ADDRESS).
    ("cuda_error__jaxley-53.log", "cuda_error",
     {"error": "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
      "function": "xla.gpu.func.launch"}),
    # The CUDA samples' check: only the runtime error's name is printed.
    ("cuda_error__vina-cuda-3.log", "cuda_error",
     {"error": "cudaErrorIllegalAddress", "cuda_error_code": 700, "location": "./inc/cuda/kernel2.cu:596"}),
    # RMM's 'CUDA error at: file:line: name string'.
    ("cuda_error__cudf-22130.log", "cuda_error",
     {"error": "cudaErrorIllegalAddress an illegal memory access was encountered",
      "location": "/tmp/conda-bld-output/bld/rattler-build_librmm/work/cpp/src/cuda_stream_view.cpp:45"}),
    # cuDNN's handle check: '(35): cudaErrorInsufficientDriver : CUDA driver version is insufficient ...'.
    ("cuda_error__phlash-31.log", "cuda_error",
     {"error": "cudaErrorInsufficientDriver : CUDA driver version is insufficient for CUDA runtime version",
      "cuda_error_code": 35}),
    # A failed INTERNAL ASSERT in PyTorch's CUDA code: the condition, the C++ site.
    ("cuda_error__ace-504.log", "cuda_error",
     {"error": "handle_0 INTERNAL ASSERT FAILED", "location": "/opt/pytorch/pytorch/c10/cuda/driver_api.cpp:15"}),
    ("cuda_error__openrlhf-866.log", "cuda_error",
     {"error": "device >= 0 && device < num_gpus INTERNAL ASSERT FAILED"}),
    # TensorFlow's UnknownError: the message says why in its second sentence.
    ("cuda_error__dialogue-56.log", "cuda_error",
     {"error": "Failed to get convolution algorithm. This is probably because cuDNN failed to initialize"}),
    # A kernel's own assertion lines (block/thread): a device-side assert.
    ("cuda_error__flowtron-52.log", "cuda_error", {"error": "device-side assert triggered"}),
    # A repr'd message: the error ends at the literal '\n'.
    ("cuda_error__adetailer-391.log", "cuda_error", {"error": "an illegal memory access was encountered"}),
    # cuBLAS through PyTorch: the status, not ' when calling `...`'.
    ("cuda_error__billwuhao-comfyui-ace-step-10.log", "cuda_error",
     {"error": "CUBLAS_STATUS_NOT_SUPPORTED", "function": "cublasGemmStridedBatchedEx"}),
    # The source line right above the error calls the op whose kernel failed.
    ("cuda_error__trn-pytorch-88.log", "cuda_error", {"error": "misaligned address", "function": "addmm"}),
    ("cuda_error__deepseek-vl-30.log", "cuda_error",
     {"error": "CUDNN_STATUS_NOT_INITIALIZED", "function": "conv2d"}),
    # TensorFlow's stream executor OOM: the bytes in brackets, the driver API's name.
    ("cuda_oom__aq-91.log", "cuda_oom", {"requested_bytes": 1015196672, "error": "CUDA_ERROR_OUT_OF_MEMORY"}),
    ("cuda_oom__anaconda-cuda-accelerated-tensorflowgpu-development-environment-1.log", "cuda_oom",
     {"requested_bytes": 33554432, "error": "CUDA_ERROR_OUT_OF_MEMORY: out of memory"}),
    # PyTorch's OOM with its first words cut: 'Tried to allocate 20.00 MiB (GPU 0; ...' (was not recalled).
    ("cuda_oom__self-explaining-structures-improve-nlp-models-6.log", "cuda_oom",
     {"requested_bytes": 20971520, "gpu": 0, "total_bytes": 2104533975, "free_bytes": 3019898}),
])
def test_cuda_facts_by_form(name: str, category: str, facts: dict[str, Any]) -> None:
    found = finding(diagnose(name), category)
    assert found.severity == "crit"
    for key, value in facts.items():
        assert found.facts.get(key) == value, (key, found.facts)


@pytest.mark.parametrize(("text", "error", "code"), [
    ("CUDA error: 700 (0x2bc) cudaErrorIllegalAddress : an illegal memory access was encountered",
     "cudaErrorIllegalAddress : an illegal memory access was encountered", None),
    ("RuntimeError: CUDA error: misaligned address", "misaligned address", None),
    ("Failed to launch: CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_LAUNCH_FAILED", None),
    ("check failed (719): cudaErrorLaunchFailure", "cudaErrorLaunchFailure", 719),
    ("nothing about CUDA here", None, None),
])
def test_cuda_error_text(text: str, error: str | None, code: int | None) -> None:
    assert cuda_error_text(text) == (error, code)
