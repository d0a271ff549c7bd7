"""What a record's form says beyond its words (issue 31): the ML stacks' logger prefixes (the worker's pid, the
logging call's file:line), a progress bar run into the record after it, glog's CHECK whose condition names the
success it expected, the native stack under it, ComfyUI's report that prints the exception before its frames, and
the torch.compile backend a traceback names. Lines are real, from the development sets (tests/data/logs/round5/dev
and wild; their manifests name each source)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.cuda_facts import cuda_facts
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs
from tools.logs.exceptions import RaisedException, classify_exception
from tools.logs.prefixes import prefix_facts, without_prefixes

DATA = Path(__file__).resolve().parents[2] / "data" / "logs"
ROUND5 = DATA / "round5" / "dev"


def diagnose(path: Path) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))


@pytest.mark.parametrize(("line", "facts", "rest"), [
    # vLLM's V1 engine core behind its Ray-style process prefix, after a progress bar redrawn without its newline.
    ("Processed prompts:   6%|█▋          | 29/512 [00:08<02:31,  3.19it/s, est. speed input: 1680.77 toks/s, output: "
     "7.16 toks/s](EngineCore_DP0 pid=10311) ERROR 10-25 11:17:27 [core.py:720] EngineCore encountered a fatal error.",
     {"pid": 10311, "location": "core.py:720"}, "EngineCore encountered a fatal error."),
    # TensorFlow's C++ logging: the source is the logging call's.
    ("2023-05-01 19:07:50.044545: W external/local_xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_0_bfc) "
     "ran out of memory", {"location": "external/local_xla/xla/tsl/framework/bfc_allocator.cc:501"},
     "Allocator (GPU_0_bfc) ran out of memory"),
    ("[2024-05-01 12:00:00,123] [INFO] [engine.py:12:step] loss scale reduced", {"location": "engine.py:12"},
     "loss scale reduced"),
    ("[kvcached][WARNING][2025-10-25 11:17:27][kv_cache_manager.py:164] available_size()=9.0 < need_size=30",
     {"location": "kv_cache_manager.py:164"}, "available_size()=9.0 < need_size=30"),
    ("2024-05-01 12:00:00.123 | ERROR    | app.main:run:12 - boom", {}, "boom"),
    # What a bar runs into is the record (the OOM killer's word mid-epoch); a plain line has no prefix.
    ("Epoch 1:  45%|████▌     | 450/1000 [01:02<01:10,  7.10it/s, loss=0.52]Killed", {}, "Killed"),
    ("Epoch 3 loss 0.25", {}, "Epoch 3 loss 0.25"),
])
def test_a_prefix_says_where_the_record_came_from(line: str, facts: dict[str, object], rest: str) -> None:
    assert prefix_facts(line) == facts
    assert without_prefixes(line) == rest


def test_glog_check_failed_is_the_error_it_printed_not_the_success_it_expected() -> None:
    lines = (ROUND5 / "cuda_error__chengyangfu-caffe-6.log").read_bytes().splitlines()
    at = next(i for i, line in enumerate(lines) if b"Check failed" in line)
    facts: dict[str, object] = {}
    after = list(enumerate(lines[at + 1:at + 9]))
    cuda_facts("cuda_error", "cuda_error", facts, lines[at], after=after)  # type: ignore[arg-type]
    assert facts["error"] == "CUBLAS_STATUS_EXECUTION_FAILED"
    assert facts["function"] == "caffe::caffe_gpu_gemv<>()"  # past the four (unknown) frames of glog's machinery
    other: dict[str, object] = {}
    cuda_facts("cuda_error", "cuda_error", other,  # type: ignore[arg-type]
               b"Check failed: e == cudaSuccess || e == cudaErrorCudartUnloading CUDA: invalid device ordinal")
    assert other["error"] == "CUDA: invalid device ordinal"


def test_two_threads_checks_run_together_are_one_finding() -> None:
    found = [f for f in diagnose(DATA / "wild" / "cuda_error__maskyolo-caffe-55.log").findings
             if f.category == "cuda_error"]
    assert [f.facts["error"] for f in found] == ["misaligned address"]


def test_a_comfyui_report_prints_the_exception_then_its_frames() -> None:
    result = diagnose(ROUND5 / "compile__if-ai-comfyui-if-ai-wishperspeechnode-6.log")
    compile_ = next(f for f in result.findings if f.category == "compile")
    assert compile_.facts["backend"] == "inductor"  # "backend='inductor' raised:" on the line above
    assert str(compile_.facts["location"]).endswith("IFWhisperSpeechNode.py:114")  # the user's frame, below it


def test_the_engine_core_prefix_gives_the_pid() -> None:
    result = diagnose(ROUND5 / "inference__ovg-project-kvcached-191.log")
    engine = next(f for f in result.findings if f.category == "inference")
    assert engine.facts["pid"] == 10311 and engine.facts["location"] == "core.py:720"


# YuzheWangPKU/DiffPepBuilder#25 (batch2k, 2024): the traceback's last frames, as posted (home directory masked;
# the long site-packages path written once, as COLLATE).
_COLLATE_PATH = "/home/<user>/.conda/envs/diffpepbuilder/lib/python3.9/site-packages/torch/utils/data/_utils/collate.py"
_COLLATE = """\
  File "COLLATE", line 127, in <dictcomp>
    return elem_type({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
  File "COLLATE", line 119, in collate
    return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
  File "COLLATE", line 162, in collate_tensor_fn
    return torch.stack(batch, 0, out=out)
RuntimeError: stack expects each tensor to be equal size, but got [62] at entry 0 and [63] at entry 1
"""


def test_a_generic_exception_raised_in_the_data_loading_code_is_the_input_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(_COLLATE.replace("COLLATE", _COLLATE_PATH))
    found = [f for f in diagnose(path).findings if f.severity != "info"]
    assert [(f.category, f.rule) for f in found] == [("dataloader", "exception_dataloader_frame")]
    assert found[0].facts["exception"] == "RuntimeError" and "equal size" in str(found[0].facts["message"])
    # The same exception raised in the user's own code is not the loader's by any rule (the learned fallback may
    # still read its collate words as data loading: a warn guess, never a rule's).
    path.write_text(_COLLATE.replace("COLLATE", "/home/<user>/DiffPepBuilder/train.py"))
    serious = [f for f in diagnose(path).findings if f.severity != "info"]
    assert [f.category for f in serious if f.rule != "learned_fallback"] == ["unclassified_error"]
    assert all(f.severity == "warn" for f in serious if f.rule == "learned_fallback")


def test_overflow_skips_under_a_progress_bar_begin_at_the_bars_step() -> None:
    # DeepSpeed's fp16 scaler halving the scale skip after skip, each record run into tqdm's bar.
    result = diagnose(ROUND5 / "nan_inf__ymcui-chinese-llama-alpaca-534.log")
    overflow = next(f for f in result.findings if f.rule == "overflow_skip")
    assert overflow.facts["step"] == 378 and overflow.facts["last_step"] == 382  # where it began, where it got to
    assert overflow.facts["loss_scale"] == 2 and overflow.facts["location"] == "loss_scaler.py:181"


def test_killed_after_a_progress_bar_is_the_process_killed(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text("Epoch 1:  45%|████▌     | 450/1000 [01:02<01:10,  7.10it/s, loss=0.52]Killed\n")
    assert [(f.category, f.facts.get("signal_number")) for f in diagnose(path).findings] == [("process_exit", 9)]


# gonka-ai/gonka#499 (pentoxine, 2025-12-20): an OpenAI client against an inference server answering 500 (the
# traceback's library frames between the user's call and the raise are cut here).
_CLIENT_500 = """\
INFO:httpx:HTTP Request: POST http://192.241.240.19:8000/v1/chat/completions "HTTP/1.1 500 Internal Server Error"
INFO:openai._base_client:Retrying request to /chat/completions in 0.879420 seconds
Traceback (most recent call last):
  File "/Users/bob/git/gonka/script.py", line 9, in <module>
    response = client.chat.completions.create(
  File "/Users/bob/git/gonka/.venv/lib/python3.12/site-packages/openai/_base_client.py", line 1047, in request
    raise self._make_status_error_from_response(err.response) from None
openai.InternalServerError: Error code: 500 - {'error': 'rpc error: code = Unknown desc = runtime error: invalid \
memory address or nil pointer dereference: panic'}
"""
# vllm-project/vllm#40856 (JasonChao-yue, 2026-04-25): the server's own access log.
_SERVER_500 = ('(APIServer pid=6051) INFO:     10.10.7.200:43364 - "POST /v1/chat/completions HTTP/1.1" 500 Internal '
               'Server Error\n')


def test_an_inference_api_error_is_the_serving_family_seen_from_either_side(tmp_path: Path) -> None:
    path = tmp_path / "client.log"
    path.write_text(_CLIENT_500)
    found = {f.rule: f for f in diagnose(path).findings}
    assert found["exception_inference_api_client"].facts["status"] == 500
    assert found["exception_inference_api_client"].facts["exception"] == "openai.InternalServerError"
    assert (found["inference_http_5xx"].facts["route"], found["inference_http_5xx"].facts["status"]) == (
        "/v1/chat/completions", 500)
    path.write_text(_SERVER_500)
    server = [f for f in diagnose(path).findings if f.severity != "info"]
    assert [(f.rule, f.facts["status"], f.facts["pid"]) for f in server] == [("inference_http_5xx", 500, 6051)]
    # A model hub's 404 is a download, not a serving route.
    path.write_text("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
                    "https://huggingface.co/org/model/resolve/main/config.json\n")
    assert all(f.category != "inference" for f in diagnose(path).findings)


@pytest.mark.parametrize(("kind", "message", "entry"), [
    # XLA's ptxas rejecting the GPU's architecture (the form of jax-ml/jax#25853 and tensorflow/tensorflow#50110).
    ("jaxlib.xla_extension.XlaRuntimeError", "INTERNAL: ptxas exited with non-zero error code 65280, output: ptxas "
     "fatal   : Value 'sm_89' is not defined for option 'gpu-name'", "compile_jit_message"),
    # A compiler's own error type, whatever its module: Inductor's C++ build, CuPy's NVRTC.
    ("torch._inductor.exc.CppCompileError", "C++ compile error", "compile_error"),
    ("cupy.cuda.compiler.CompileException", "nvrtc: error: invalid value for --gpu-architecture (-arch)",
     "compile_error"),
])
def test_a_device_compiler_failing_is_the_compile_family(kind: str, message: str, entry: str) -> None:
    classified = classify_exception(RaisedException(kind, message, 1, b""))
    assert classified is not None and (classified.entry.id, classified.entry.category) == (entry, "compile")


def test_one_ranks_timeout_is_not_every_rank_alike(tmp_path: Path) -> None:
    # One rank's watchdog line (the first line of wild/nccl_timeout__accelerate-223.log) in a file of its own, the job's
    # size not printed: the conclusion says whose log it is, never that every rank timed out alike.
    line = (DATA / "wild" / "nccl_timeout__accelerate-223.log").read_text().splitlines()[0]
    path = tmp_path / "rank2.log"
    path.write_text(line + "\n")
    conclusion = " ".join(diagnose(path).conclusion)
    assert "Only rank 2's log was read" in conclusion and "alike" not in conclusion


@pytest.mark.parametrize(("line", "facts"), [
    # llama.cpp's ggml, the CUDA runtime's own error name under a thrust bad_alloc, ONNX Runtime's BFC arena,
    # TensorRT's builder: the device allocation failing, whoever asked for it.
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory",
     {"gpu": 0, "requested_bytes": 8192 * 2**20, "error": "cudaMalloc failed: out of memory"}),
    ("  what():  std::bad_alloc: cudaErrorMemoryAllocation: out of memory",
     {"error": "cudaErrorMemoryAllocation: out of memory"}),
    ("Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* onnxruntime::BFCArena::"
     "AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed to "
     "allocate memory for requested buffer of size 5248000000", {"requested_bytes": 5248000000}),
    ("[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory (no further information)",
     {"error": "Error Code 2: OutOfMemory (no further information)"}),
])
def test_a_device_allocation_failing_is_an_oom_whoever_asked(tmp_path: Path, line: str, facts: dict[str, object]
                                                             ) -> None:
    path = tmp_path / "job.log"
    path.write_text(line + "\n")
    found = [f for f in diagnose(path).findings if f.severity != "info"]
    assert [(f.category, f.severity) for f in found] == [("cuda_oom", "crit")]
    assert {k: found[0].facts.get(k) for k in facts} == facts
