"""Data loading and process exits by meaning (issue 31): the words the libraries and launchers a training stack runs
print for these failures, each file below holding the message as that library's source raises or prints it (named
per case). diagnose_logs reads the files from disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 50, in <module>\n    for batch in loader:\n'


def diagnose(tmp_path: Path, text: str) -> DiagnoseLogsResult:
    (tmp_path / "job.log").write_text(text, encoding="utf-8")
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["job.log"]), ToolContext(roots=(tmp_path.resolve(),)))


@pytest.mark.parametrize(("text", "category", "facts"), [
    # torch/utils/data/_utils/collate.py: a sample the default collate cannot batch (a __getitem__ that returned None).
    (TRACEBACK + "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
     "found <class 'NoneType'>\n", "dataloader", {"sample_type": "NoneType"}),
    # Pillow's ImageFile.load on a truncated image.
    (TRACEBACK + "OSError: image file is truncated (5 bytes not processed)\n", "dataloader", {"exception": "OSError"}),
    # torch/utils/data/sampler.py's RandomSampler over an empty dataset.
    (TRACEBACK + "ValueError: num_samples should be a positive integer value, but got num_samples=0\n", "dataloader",
     {"num_samples": 0}),
    # torch.distributed.launch / DeepSpeed running the trainer with subprocess: a child killed, a child that failed.
    (TRACEBACK + "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=0']' "
     "died with <Signals.SIGKILL: 9>.\n", "process_exit", {"signal": "SIGKILL", "signal_number": 9}),
    (TRACEBACK + "subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', '--local_rank=1']' "
     "returned non-zero exit status 1.\n", "process_exit", {"exitcode": 1}),
    # DeepSpeed's launcher (deepspeed/launcher/launch.py's sigkill_handler).
    ("[2024-01-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1234\n"
     "[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
     "'--local_rank=0'] exits with return code = -9\n", "process_exit", {"exitcode": -9, "signal": "SIGKILL"}),
])
def test_the_family_is_named_from_the_libraries_words(tmp_path: Path, text: str, category: str,
                                                     facts: dict[str, Any]) -> None:
    result = diagnose(tmp_path, text)
    assert result.findings[0].category == category, [(f.category, f.rule) for f in result.findings]
    assert {k: result.findings[0].facts.get(k) for k in facts} == facts


def test_a_kubectl_block_is_the_containers_exit_not_a_compile_table(tmp_path: Path) -> None:
    # kubectl describe pod: `Reason:` and `Exit Code:` aligned in columns. Those two words also begin lines of
    # torch._dynamo.explain()'s break list and graph-break table, which only go on a Dynamo message above them.
    result = diagnose(tmp_path, "Containers:\n  trainer:\n    State:          Running\n    Last State:     Terminated\n"
                                "      Reason:       OOMKilled\n      Exit Code:    137\n")
    oom = [f for f in result.findings if f.rule == "k8s_oom_killed"]
    assert oom and oom[0].facts["exitcode"] == 137 and oom[0].severity == "crit"
    assert "compile" not in [f.category for f in result.findings]


@pytest.mark.parametrize(("text", "rule", "facts"), [
    # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: the NCCL unique id fetched from rank 0 through the store.
    ("RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store "
     "by key '0', but store->get('0') got error: Connection reset by peer\n", "process_group_setup",
     {"category": "nccl_init_network", "error": "Connection reset by peer", "root_rank": 0}),
    # torch/distributed/distributed_c10d.py's store-based barrier: two of four ranks joined.
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: "
     "store_based_barrier_key:1 (world_size=4, worker_count=2, timeout=0:30:00)\n", "process_group_setup",
     {"category": "nccl_init_network", "world_size": 4, "joined": 2}),
    # ProcessGroupGloo.cpp's monitored barrier names the rank that did not arrive.
    ("[E ProcessGroupGloo.cpp:138] Rank 1 successfully reached monitoredBarrier, but received errors while waiting "
     "for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n", "monitored_barrier",
     {"category": "nccl_timeout", "faulty_rank": 0}),
    # A training loop's own OOM handling (sd_dreambooth_extension's words).
    ("OOM Detected, reducing batch/grad size to 12/1.\n", "oom_handled", {"category": "cuda_oom"}),
    # torch/cuda/__init__.py's warning when CUDA cannot start.
    ("/usr/lib/python3/site-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: CUDA unknown "
     "error - this may be due to an incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES "
     "after program start. Setting the available devices to be zero.\n", "cuda_init_warning",
     {"category": "cuda_error", "error": "CUDA unknown error"}),
    # Go's runtime and Rust's std, glog's fatal record, argparse, a full disk, a FATAL record.
    ("panic: runtime error: invalid memory address or nil pointer dereference\n[signal SIGSEGV: segmentation "
     "violation code=0x1 addr=0x0 pc=0x4a1b2c]\n", "runtime_panic",
     {"category": "unclassified_error", "error": "runtime error: invalid memory address or nil pointer dereference"}),
    ("thread 'main' panicked at 'called `Result::unwrap()` on an `Err` value: NotFound', router/src/main.rs:310:10\n",
     "runtime_panic", {"category": "unclassified_error", "location": "router/src/main.rs:310"}),
    ("F0101 10:00:00.000000  1234 main.cc:100] Check failed: x == y (3 vs. 4)\n", "glog_fatal",
     {"category": "unclassified_error", "location": "main.cc:100", "error": "Check failed: x == y (3 vs. 4)"}),
    ("usage: train.py [-h] [--local_rank LOCAL_RANK]\ntrain.py: error: unrecognized arguments: --local-rank=0\n",
     "command_line_refused", {"category": "unclassified_error", "error": "unrecognized arguments: --local-rank=0"}),
    ("2024-05-01 10:00:00 ERROR [trainer] Failed to save checkpoint to /ckpt/step_1000: [Errno 28] No space left on "
     "device\n", "disk_full", {"category": "unclassified_error", "path": "/ckpt/step_1000"}),
    ("FATAL: Could not open file /data/train.bin\n", "fatal_record",
     {"category": "unclassified_error", "error": "Could not open file /data/train.bin"}),
])
def test_what_a_line_says_is_a_finding_with_its_facts(tmp_path: Path, text: str, rule: str,
                                                      facts: dict[str, Any]) -> None:
    result = diagnose(tmp_path, text)
    found = [f for f in result.findings if f.rule == rule]
    assert found, [(f.category, f.rule) for f in result.findings]
    assert {k: (found[0].category if k == "category" else found[0].facts.get(k)) for k in facts} == facts


def test_the_jvm_running_out_of_heap_is_not_a_gpu_oom(tmp_path: Path) -> None:
    result = diagnose(tmp_path, 'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space\n')
    assert [f.category for f in result.findings] == ["unclassified_error"]


@pytest.mark.parametrize(("path", "category", "facts"), [
    # FFCV's transforms run compiled by numba under its epoch iterator: numba's TypingError is the pipeline's.
    (DATA / "logs" / "round13" / "dev" / "dataloader__libffcv-ffcv-372.log", "dataloader",
     {"exception": "numba.core.errors.TypingError"}),
    # Kokoro-FastAPI's server logs its missing model at ERROR level; the traceback under it is cut.
    (DATA / "logs" / "round14" / "dev" / "inference__remsky-Kokoro-FastAPI-64.log", "inference",
     {"error": "ONNX model not found at /app/Kokoro-82M/kokoro-v0_19.onnx"}),
])
def test_real_excerpts_by_meaning(path: Path, category: str, facts: dict[str, Any]) -> None:
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]),
                       ToolContext(roots=(path.parent.resolve(),)))
    assert result.findings[0].category == category
    assert {k: result.findings[0].facts.get(k) for k in facts} == facts


@pytest.mark.parametrize(("text", "facts"), [
    # Building native code: the linker's own words (Triton's launcher build without libcuda), pip's wheel build.
    ("/usr/bin/ld: cannot find -lcuda: No such file or directory\ncollect2: error: ld returned 1 exit status\n",
     {"error": "ld: cannot find -lcuda:"}),
    ("  Building wheel for flash-attn (setup.py) ... error\n  ERROR: Failed building wheel for flash-attn\n",
     {"package": "flash-attn"}),
    # An extension built against another torch: its .so's C++ symbols are not in this libtorch.
    (TRACEBACK + "ImportError: /usr/lib/python3/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
     "undefined symbol: _ZN3c104cuda9SetDeviceEi\n", {"exception": "ImportError"}),
])
def test_a_native_build_or_binary_that_does_not_fit_is_compile(tmp_path: Path, text: str,
                                                              facts: dict[str, Any]) -> None:
    result = diagnose(tmp_path, text)
    assert (result.findings[0].category, result.findings[0].severity) == ("compile", "crit")
    assert {k: result.findings[0].facts.get(k) for k in facts} == facts


def test_an_exception_raised_in_a_datasets_getitem_is_a_sample_that_could_not_be_read(tmp_path: Path) -> None:
    # A paste that kept only the user's frames: the dataset's __getitem__ could not open a sample's file.
    result = diagnose(tmp_path, 'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n'
                      '    for images, labels in loader:\n  File "/home/<user>/proj/data/coco.py", line 77, in '
                      '__getitem__\n    image = cv2.imdecode(open(path, "rb").read())\nFileNotFoundError: [Errno 2] No '
                      'such file or directory: \'/data/coco/train2017/000000391895.jpg\'\n')
    assert [(f.category, f.facts.get("exception")) for f in result.findings] == [("dataloader", "FileNotFoundError")]


@pytest.mark.parametrize("text", [
    # vLLM's V1 engine, its model checks and its parallel-configuration checks; transformers too old for a model.
    TRACEBACK + "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
    TRACEBACK + "ValueError: Total number of attention heads (14) must be divisible by tensor parallel size (4).\n",
    TRACEBACK + "ValueError: The checkpoint you are trying to load has model type `qwen3` but Transformers does not "
    "recognize this architecture.\n",
    # llama.cpp's loader.
    "llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen3'\n",
])
def test_a_serving_engine_that_cannot_start_is_inference(tmp_path: Path, text: str) -> None:
    result = diagnose(tmp_path, text)
    assert (result.findings[0].category, result.findings[0].severity) == ("inference", "crit")
