"""Where a failure was raised, for each form real logs print it in (lines from tests/data/logs/wild, whose
cases_*.jsonl name the source of each)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs
from tools.logs.sites import defined_at, site_facts


@pytest.mark.parametrize(("line", "location", "function"), [
    # gloo's bracketed location, and TensorRT's after its level tag.
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms",
     "../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81", None),
    ("[error][simple_yolo.cu:556]:launch failed: no kernel image is available for execution on the device",
     "simple_yolo.cu:556", None),
    # CUDA check macros: THCudaCheck, a [file, line] pair, 'file: line N ... at function f('.
    ("THCudaCheck FAIL file=/home/<user>/torch/extra/cutorch/lib/THC/THCGeneral.c line=70 error=35 : CUDA driver",
     "/home/<user>/torch/extra/cutorch/lib/THC/THCGeneral.c:70", None),
    ("CUDA error 716 [/usr/local/cuda/targets/x86_64-linux/include/cub/util_device.cuh, 351]: misaligned address",
     "/usr/local/cuda/targets/x86_64-linux/include/cub/util_device.cuh:351", None),
    ("CUDA Error: misaligned address (716) /code/gemv/include/attention/prefill.cuh: line 1918 at function "
     "cudaLaunchKernel((void*)kernel, nblks)", "/code/gemv/include/attention/prefill.cuh:1918", "cudaLaunchKernel"),
    # A device-side assert names the kernel; TensorFlow's OP_REQUIRES names the op's file, not the logger's.
    ("/pytorch/aten/src/THCUNN/SpatialClassNLLCriterion.cu:106: cunn_SpatialClassNLLCriterion_updateOutput_kernel: "
     "block: [0,0,0], thread: [725,0,0] Assertion `t >= 0 && t < n_classes` failed.",
     "/pytorch/aten/src/THCUNN/SpatialClassNLLCriterion.cu:106", "cunn_SpatialClassNLLCriterion_updateOutput_kernel"),
    ("2019-11-11 11:45:07.182077: W tensorflow/core/framework/op_kernel.cc:1655] OP_REQUIRES failed at "
     "collective_ops.cc:253 : Invalid argument: Shape mismatch", "collective_ops.cc:253", None),
    # NCCL's prefix, with and without the host:pid:tid in front; glog's CHECK.
    ("node-8x-v100-nvlink-1:39719:39719 [3] init.cu:1197 NCCL WARN Mismatched collective detected",
     "init.cu:1197", None),
    ("init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls", "init.cc:1247",
     None),
    ("F0327 14:22:53.845574  4828 math_functions.hpp:179] Check failed: error == cudaSuccess (74 vs. 0)",
     "math_functions.hpp:179", None),
    # cuBLAS names the call, CNTK the expression.
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb)`",
     None, "cublasSgemm"),
    ("CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED ; GPU=1 ; hostname=<host> ; expr=cublas_gemm(cuHandle)",
     None, "cublas_gemm"),
])
def test_site_on_the_line(line: str, location: str | None, function: str | None) -> None:
    facts = site_facts(line.encode(), [], [])
    assert (facts.get("location"), facts.get("function")) == (location, function)


def test_python_logger_prefix_is_not_the_site() -> None:
    # dynamo logs through Python logging: convert_frame.py:844 is where it logged, not where anything failed.
    line = b"W1126 16:03:16.529497 1228885 torch/_dynamo/convert_frame.py:844] [1/8] torch._dynamo hit config.cache"
    assert site_facts(line, [], []) == {}


def test_innermost_frame_of_the_traceback_above_an_exception() -> None:
    before = [b'  File "/usr/lib/python3.12/site-packages/vllm/worker/worker.py", line 493, '
              b"in raise_if_cache_size_invalid",
              b'    raise ValueError("No available memory for the cache blocks. "']
    line = b"ValueError: No available memory for the cache blocks."
    assert site_facts(line, before, []) == {
        "location": "/usr/lib/python3.12/site-packages/vllm/worker/worker.py:493",
        "function": "raise_if_cache_size_invalid"}
    # The same frame above a line that is not an exception is another message's traceback: no site.
    assert site_facts(b"Graph break from `Tensor.item()`, consider setting:", before, []) == {}


def test_cpp_exception_raised_from_below_the_message() -> None:
    after = [b"CUDA kernel errors might be asynchronously reported at some other API call.",
             b"For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
             b"Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
             b"",
             b"Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
             b"(most recent call first):"]
    assert site_facts(b"RuntimeError: CUDA error: unspecified launch failure", [], after) == {
        "location": "/pytorch/c10/cuda/CUDAException.cpp:43", "function": "c10_cuda_check_implementation"}


def test_tensorflow_names_where_the_failing_op_was_defined() -> None:
    # TensorFlow 1.x (tests/data/logs/round2/dev/cuda_error__dialogue-56.log): the op's definition is the site.
    below = [b"         [[node cnn_aggregation/Conv3D (defined at /DAM/utils/layers.py:257)  = Conv3D[T=DT_FLOAT]"]
    assert defined_at(below) == "/DAM/utils/layers.py:257"
    assert defined_at([b"         [[{{node loss/Mean/_273}} = _Recv[client_terminated=false]"]) is None


def _diagnosed(path: Path) -> list[dict[str, object]]:
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]),
                       ToolContext(roots=(path.parent.resolve(),)))
    return [dict(f.facts) for f in result.findings]


@pytest.mark.parametrize(("path", "location"), [
    # Caffe prints its failed CHECK bare first, then again under glog's prefix with the file:line: a finding's later
    # line gives the location its first did not.
    (DATA / "logs" / "wild" / "cuda_error__maskyolo-caffe-55.log", "math_functions.hpp:179"),
    # Paddle's enforce prints the source under the summary, on a line of its own: `(at .../cuda_allocator.cc:69)`.
    (DATA / "logs" / "round5" / "dev" / "cuda_oom__paddlepaddle-paddleocr-1505.log",
     "/paddle/paddle/fluid/memory/allocation/cuda_allocator.cc:69"),
    # loguru's traceback (diagnose=True) prints every frame's variables under its source line: the frames and the
    # exception nine lines below the last are one traceback.
    (DATA / "logs" / "round11" / "dev" / "cuda_error__irisrainbowneko-genshin_auto_fish-63.log",
     "D:\\JIQIxuexi\\Anacon\\envs\\ysfish\\lib\\site-packages\\torch\\nn\\modules\\conv.py:420"),
])
def test_the_location_is_found_where_the_log_prints_it(path: Path, location: str) -> None:
    assert _diagnosed(path)[0]["location"] == location
