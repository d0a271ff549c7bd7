"""Failures of the GPU stack outside PyTorch's own words (issue 31: other frameworks' logs score lowest on fresh
excerpts): the CUDA libraries a build cannot load, cuDNN and cuBLAS as TensorFlow, XLA and Paddle report them, ROCm's
runtime in its own names, and a record at fatal level that no category knows. Each line is the form the framework
prints (its source file and message as the framework writes them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs


def _diagnose(tmp_path: Path, text: str) -> DiagnoseLogsResult:
    (tmp_path / "job.log").write_text(text)
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["job.log"]), ToolContext(roots=(tmp_path,)))


@pytest.mark.parametrize(("line", "rule", "facts"), [
    # TensorFlow 1.x/2.x: cuBLAS could not run the first matmul (no GPU memory left for its handle, usually).
    ("tensorflow.python.framework.errors_impl.InternalError: Blas GEMM launch failed : a.shape=(100, 784), "
     "b.shape=(784, 10), m=100, n=10, k=784", "exception_cuda_error_message",
     {"exception": "tensorflow.python.framework.errors_impl.InternalError"}),
    # JAX/XLA: cuDNN would not initialise (its version, or no memory for its handle).
    ("jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization failed. Look at the "
     "errors above for more details.", "exception_cuda_error_message", {}),
    # XLA logs the version mismatch at error level, before that failure.
    ("2024-01-01 00:00:00.000000: E external/xla/xla/stream_executor/cuda/cuda_dnn.cc:439] Loaded runtime CuDNN "
     "library: 8.6.0 but source was compiled with: 8.9.4.  CuDNN library needs to have matching major version and "
     "equal or higher minor version.", "exception_cuda_library_missing",
     {"runtime_version": "8.6.0", "built_version": "8.9.4"}),
    # Paddle's loader, and ctypes' on a missing cuDNN.
    ("RuntimeError: (PreconditionNotMet) The third-party dynamic library (libcudnn.so) that Paddle depends on is not "
     "configured correctly. (error code is libcudnn.so: cannot open shared object file: No such file or directory)",
     "exception_cuda_library_missing", {"library": "libcudnn.so"}),
    ("OSError: libcudnn.so.8: cannot open shared object file: No such file or directory",
     "exception_cuda_library_not_found", {"library": "libcudnn.so.8"}),
    # cuDNN 8's own loader, right before it aborts.
    ("Could not load library libcudnn_cnn_infer.so.8. Error: libnvrtc.so: cannot open shared object file: No such "
     "file or directory", "cuda_error", {}),
    # MXNet asked for a GPU index the process does not have.
    ("mxnet.base.MXNetError: [08:21:10] /work/mxnet/src/engine/threaded_engine.cc:329: Check failed: exec_ctx.dev_id "
     "< device_count_ (1 vs. 1) : Invalid GPU Id: 1, Valid device id should be less than device_count: 1",
     "exception_cuda_no_device", {}),
    # ROCm: no code object for this GPU (its 'no kernel image'), and the HSA runtime's illegal address.
    ("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!", "cuda_error",
     {"cuda_error_name": "hipErrorNoBinaryForGpu", "error": "Unable to find code object for all current devices!"}),
    (":0:rocdevice.cpp            :2614: 3344934561 us: [pid:1234] Callback: Queue 0x7f0000 aborting with error : "
     "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal "
     "address. code: 0x29", "cuda_error", {"cuda_error_name": "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"}),
])
def test_the_gpu_stack_in_other_frameworks_words(tmp_path: Path, line: str, rule: str, facts: dict[str, Any]) -> None:
    [found] = [f for f in _diagnose(tmp_path, line + "\n").findings if f.severity != "info"]
    assert (found.category, found.rule) == ("cuda_error", rule)
    assert {k: found.facts.get(k) for k in facts} == facts


@pytest.mark.parametrize(("line", "category", "rule"), [
    # MindSpore's allocator (GPU and Ascend) in its own words.
    ("RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: Default/Conv2D-op12, alloc size: "
     "1073741824B.", "cuda_oom", "exception_oom_message"),
    # tf.debugging.check_numerics; Paddle's FLAGS_check_nan_inf in the exception it raises.
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Tensor had NaN values", "nan_inf",
     "exception_nan_message"),
    ("RuntimeError: (PreconditionNotMet) There are NAN or INF (num_nan=3, num_inf=0) in [operator=conv2d, "
     "tensor=conv2d_0.tmp_0].", "nan_inf", "exception_nan_message"),
    # Paddle's enforce message with the CUDA runtime's code in its own casing.
    ("paddle.fluid.core_avx.EnforceNotMet: Invoke operator fill_constant error. Cuda error(3), initialization error.",
     "cuda_error", "exception_cuda_error_message"),
    # paddle.distributed.launch on a trainer that died.
    ("ERROR 2023-03-01 10:00:00,000 launch_utils.py:642] ABORT!!! Out of all 4 trainers, the trainer process with "
     "rank=[2] was aborted. Please check its log.", "process_exit", "paddle_trainer_aborted"),
])
def test_other_frameworks_failures_by_their_words(tmp_path: Path, line: str, category: str, rule: str) -> None:
    [found] = [f for f in _diagnose(tmp_path, line + "\n").findings if f.severity != "info"]
    assert (found.category, found.rule) == (category, rule)


def test_paddles_aborted_trainer_is_named(tmp_path: Path) -> None:
    [found] = _diagnose(tmp_path, "ABORT!!! Out of all 4 trainers, the trainer process with rank=[2] was aborted. "
                                  "Please check its log.\n").findings
    assert found.ranks == [2] and found.facts["world_size"] == 4


@pytest.mark.parametrize("line", [
    # torchvision's import-time warning names a missing libcudart and changes nothing for training.
    "UserWarning: Failed to load image Python extension: libcudart.so.11.0: cannot open shared object file: No such "
    "file or directory",
    # TensorFlow on a machine without CUDA logs this at W and runs on the CPU.
    "2020-01-01 00:00:00.000000: W tensorflow/stream_executor/platform/default/dso_loader.cc:55] Could not load "
    "dynamic library 'libcudart.so.10.1'; dlerror: libcudart.so.10.1: cannot open shared object file: No such file or "
    "directory",
])
def test_a_missing_cuda_library_in_a_warning_is_no_failure(tmp_path: Path, line: str) -> None:
    assert not [f for f in _diagnose(tmp_path, line + "\nstep 10 loss 2.3\n").findings if f.severity != "info"]


def test_a_package_that_will_not_import_for_its_cuda_library_is_its_installation(tmp_path: Path) -> None:
    # flash_attn built for CUDA 12 under a CUDA 11 torch: the package's installation, not a CUDA failure.
    [found] = _diagnose(tmp_path, "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
                                  "directory\n").findings
    assert (found.category, found.facts["exception"]) == ("unclassified_error", "ImportError")


@pytest.mark.parametrize(("line", "rule", "location"), [
    # TensorFlow's CHECK in its C++ logging: the process aborts after it.
    ("2019-06-03 10:11:12.123456: F tensorflow/core/platform/default/env.cc:73] Check failed: ret == 0 (11 vs. 0)"
     "Thread creation via pthread_create() failed.", "fatal_record", "tensorflow/core/platform/default/env.cc:73"),
    # glog's LOG(FATAL) / CHECK form (XLA, Caffe): log_rules.toml's own rule.
    ("F0105 23:50:34.026692   34204 nccl_all_reduce_thunk.cc:175] Check failed: reduction_kind.has_value()",
     "glog_fatal", "nccl_all_reduce_thunk.cc:175"),
    ('time="2024-05-01T12:00:00Z" level=fatal msg="failed to start the device plugin"', "fatal_record", None),
])
def test_a_fatal_record_no_category_knows_is_unclassified(tmp_path: Path, line: str, rule: str,
                                                           location: str | None) -> None:
    [found] = _diagnose(tmp_path, "step 1 loss 2.3\n" + line + "\n").findings
    assert (found.category, found.rule, found.severity) == ("unclassified_error", rule, "warn")
    assert found.facts.get("location") == location


@pytest.mark.parametrize("record", [
    "F0105 23:50:34.026692   34204 engine.cc:175] Check failed: status.ok()",
    "2019-06-03 10:11:12.123456: F tensorflow/core/common_runtime/executor.cc:175] Check failed: status.ok()",
])
def test_a_fatal_record_after_a_known_failure_is_its_last_word(tmp_path: Path, record: str) -> None:
    result = _diagnose(tmp_path, "RuntimeError: CUDA error: an illegal memory access was encountered\n" + record + "\n")
    assert {f.category for f in result.findings if f.severity != "info"} == {"cuda_error"}
