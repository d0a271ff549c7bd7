"""The mechanisms added for round 8's development part (issue 31), each on the real excerpts it was written for
(tests/data/logs/round8/dev; each excerpt's source URL is in its cases.jsonl and in the comment above its case):
the other printed forms of a traceback (IPython's, a debugger's, a C++ exception's what(), a worker's traceback as a
message, records run together on one line), the exception taxonomy's new families, the error-line forms of
TensorFlow's C++ logging, TensorRT and API error bodies, the process exits told by torch.multiprocessing, bash, the
kernel and Windows, an OOM's size and GPU in the other allocators' words, and the facts a line prints in another
form (a duration in seconds, a rank in a launcher's prefix, a metric's field name of two words)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, diagnose_logs
from tools.logs.exits import windows_status
from tools.logs.wraps import split_records

DATA = Path(__file__).resolve().parents[2] / "data" / "logs"
ROUND8 = DATA / "round8" / "dev"


def diagnose(path: Path) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))


def serious(result: DiagnoseLogsResult) -> list[LogFinding]:
    return [f for f in result.findings if f.severity != "info"]


@pytest.mark.parametrize(("name", "category", "facts"), [
    # https://github.com/TuSimple/mx-maskrcnn/issues/98: `terminate called after throwing an instance of 'dmlc::Error'`
    # and its what() (its last word cut by the terminal onto the next line) name a cudaMalloc OOM.
    ("cuda_oom__tusimple-mx-maskrcnn-98.log", "cuda_oom", {"exception": "dmlc::Error"}),
    # https://github.com/apache/mxnet/issues/18224: IPython's `TimeoutError   Traceback (most recent call last)`, its
    # `x.py in f(...)` frames (the last in MXNet Gluon's data loader), cut before its final line; MXNet's own
    # "Worker timed out after 120 seconds." above it.
    ("dataloader__apache-mxnet-18224.log", "dataloader",
     {"exception": "TimeoutError", "error": "Worker timed out after 120 seconds."}),
    # https://github.com/ELS-RD/kernl/issues/142: VS Code's `Exception has occurred: BackendCompilerFailed`, its
    # message over two lines, and the frames after the chain marker (cut) that show where it was handled.
    ("compile__els-rd-kernl-142.log", "compile",
     {"exception": "BackendCompilerFailed", "location": "/home/<user>/kernl/openclip-kernl/kernl/src/kernl/"
      "implementations/layer_norm.py:290"}),
    # https://github.com/WissingChen/CRA-GQA/issues/14: the same report pasted without its first line: an untyped
    # message right above header-less frames, innermost first.
    ("unclassified_error__wissingchen-cra-gqa-14.log", "unclassified_error",
     {"message": "mat1 and mat2 shapes cannot be multiplied (512x2048 and 768x768)",
      "location": "C:\\Users\\<user>\\Desktop\\files\\projects\\CRA-GQA\\modules\\m_cra\\causal_module.py:30"}),
    # https://github.com/yhenon/pytorch-retinanet/issues/93: PyTorch <= 1.1 re-raises a worker's exception with its
    # traceback as the message (`ValueError: Traceback (most recent call last):`), from the DataLoader's code.
    ("dataloader__yhenon-pytorch-retinanet-93.log", "dataloader",
     {"exception": "ValueError", "location": "train.py:125"}),
    # https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/876: two records on one line, the worker's
    # `OSError: image file is truncated` and its wrapper `Caught OSError in DataLoader worker process 3`: a worker
    # that could not read a sample.
    ("dataloader__junyanz-pytorch-cyclegan-and-pix2pix-876.log", "dataloader",
     {"exception": "OSError", "error": "OSError: image file is truncated", "dataloader_worker": "yes"}),
    # https://github.com/chemprop/chemprop/issues/853: Lightning's wording of DDP's unused-parameter error; the rank
    # from the `[rank3]:` lines of its traceback below it.
    ("collective_mismatch__chemprop-chemprop-853.log", "collective_mismatch", {"exception": "RuntimeError"}),
    # https://github.com/deepinsight/insightface/issues/2288: the reducer's static-graph check.
    ("collective_mismatch__deepinsight-insightface-2288.log", "collective_mismatch", {"exception": "RuntimeError"}),
    # https://github.com/etched-ai/open-oasis/issues/27: ROCm's `HIP error: invalid device function`.
    ("cuda_error__etched-ai-open-oasis-27.log", "cuda_error",
     {"exception": "RuntimeError", "error": "invalid device function"}),
    # https://github.com/canopyai/Orpheus-TTS/issues/44: vLLM refuses bfloat16 on a compute capability 6.1 GPU (a bare
    # line); the whole message is the error, its second sentence says why.
    ("inference__canopyai-orpheus-tts-44.log", "inference",
     {"exception": "ValueError", "required_capability": 8.0, "capability": 6.1, "gpu_name": "Tesla P40"}),
    # https://github.com/HasnainRaz/Skin-Segmentation-TensorFlow/issues/3: tf.data cannot batch images of two sizes.
    ("dataloader__hasnainraz-skin-segmentation-tensorflow-3.log", "dataloader",
     {"exception": "tensorflow.python.framework.errors_impl.InvalidArgumentError", "location": "./model.py:169"}),
    # https://github.com/vwxyzjn/cleanrl/pull/338: jax.distributed's shutdown barrier: DEADLINE_EXCEEDED.
    ("nccl_timeout__vwxyzjn-cleanrl-338.log", "nccl_timeout",
     {"exception": "jaxlib.xla_extension.XlaRuntimeError", "message": "DEADLINE_EXCEEDED: Deadline Exceeded"}),
])
def test_exceptions_in_other_printed_forms_and_families(name: str, category: str, facts: dict[str, Any]) -> None:
    result = diagnose(ROUND8 / name)
    found = [f for f in serious(result) if f.category == category]
    assert found, [(f.category, f.rule) for f in result.findings]
    assert not [f for f in serious(result) if f.category != category]  # no other serious family beside it
    for key, value in facts.items():
        assert any(f.facts.get(key) == value for f in found), (key, [f.facts for f in found])


def test_the_rank_of_an_exception_comes_from_the_prefixed_lines_around_it() -> None:
    # chemprop#853 (above): the message has no prefix, its traceback's lines carry `[rank3]:`.
    finding = next(f for f in diagnose(ROUND8 / "collective_mismatch__chemprop-chemprop-853.log").findings
                   if f.category == "collective_mismatch")
    assert finding.ranks == [3]
    # https://github.com/OpenBMB/VisRAG/issues/40: the line under the message is `[rank1]: Parameter at index 677 ...`.
    finding = next(f for f in diagnose(ROUND8 / "collective_mismatch__openbmb-visrag-40.log").findings
                   if f.category == "collective_mismatch")
    assert finding.ranks == [1]


@pytest.mark.parametrize(("name", "category", "facts"), [
    # https://github.com/google/grain/issues/802: TensorFlow/XLA's C++ logging at E (`.837611: E external/x.cc:962]`):
    # the coordination service rejects a task that restarted.
    ("nccl_init_network__google-grain-802.log", "nccl_init_network",
     {"task": "/job:jax_worker/replica:0/task:1",
      "error": "/job:jax_worker/replica:0/task:1 unexpectedly tried to connect with a different incarnation."}),
    # https://github.com/talmolab/sleap/pull/1485: TensorFlow's `OP_REQUIRES failed at xla_ops.cc:446 : INTERNAL:
    # libdevice not found` (logged at W): XLA's toolchain is missing; the site is the OP_REQUIRES'.
    ("compile__talmolab-sleap-1485.log", "compile",
     {"error": "libdevice not found at ./libdevice.10.bc", "location": "xla_ops.cc:446"}),
    # https://github.com/yuvraj108c/ComfyUI-Upscaler-Tensorrt/issues/36: polygraphy's `[E] IBuilder::...`: TensorRT
    # could not build the engine.
    ("compile__yuvraj108c-comfyui-upscaler-tensorrt-36.log", "compile",
     {"backend": "TensorRT", "trt_error": "Error Code 10: Internal Error",
      "error": "IBuilder::buildSerializedNetwork: Error Code 10: Internal Error (Could not find any implementation "
               "for node /model/model.6/Conv + PWN(/model/model.7/LeakyRelu).)"}),
    # https://github.com/ByteDance-Seed/Triton-distributed/issues/5: an indented `ptxas error   :` record run together
    # with the `ptxas info` records after it: the error ends where the next record starts.
    ("compile__bytedance-seed-triton-distributed-5.log", "compile",
     {"required_hex": "0x20400", "limit_hex": "0xc000",
      "error": "Entry function '_ZN11distributed3ops47moe_ag_scatter_align_block_size_parallel_kernelILi64ELi256EEEv"
               "PliiiiiPjPVjPiS6_S6_S6_S6_' uses too much shared data (0x20400 bytes, 0xc000 max)"}),
    # https://github.com/michaelfeil/infinity/issues/325: a pretty-printed JSON error body whose message names an
    # exception: a request the serving engine refused.
    ("inference__michaelfeil-infinity-325.log", "inference", {"exception": "ModelNotDeployedError"}),
    # https://github.com/eleiton/ollama-intel-arc/issues/23: the runner's exit status in the message.
    ("inference__eleiton-ollama-intel-arc-23.log", "inference", {"exitcode": 2}),
])
def test_error_lines_in_other_forms(name: str, category: str, facts: dict[str, Any]) -> None:
    found = [f for f in serious(diagnose(ROUND8 / name)) if f.category == category]
    assert found
    for key, value in facts.items():
        assert any(f.facts.get(key) == value for f in found), (key, [f.facts for f in found])


@pytest.mark.parametrize(("name", "severity", "facts"), [
    # https://github.com/HRNet/HigherHRNet-Human-Pose-Estimation/issues/47: torch.multiprocessing.spawn's
    # `Exception: process 1 terminated with signal SIGKILL` (the process index is the rank).
    ("process_exit__hrnet-higherhrnet-human-pose-estimation-47.log", "crit",
     {"signal": "SIGKILL", "signal_number": 9, "exception": "Exception"}),
    # https://github.com/lyu-yx/ACUMEN/issues/4: the same in a loguru-annotated traceback (ProcessExitedException).
    ("process_exit__lyu-yx-acumen-4.log", "crit",
     {"signal": "SIGKILL", "exception": "torch.multiprocessing.spawn.ProcessExitedException"}),
    # https://github.com/Fictionarry/TalkingGaussian/issues/25: bash's `scripts/train_xx.sh: line 8: 70450 Killed ...`.
    ("process_exit__fictionarry-talkinggaussian-25.log", "crit", {"pid": 70450, "reason": "Killed"}),
    # https://github.com/city-super/Scaffold-GS/issues/104: the kernel's OOM line as the poster retyped it
    # (`Out of memory:Killed process 217423（python）`).
    ("process_exit__city-super-scaffold-gs-104.log", "crit",
     {"pid": 217423, "reason": "Out of memory:Killed process 217423"}),
    # https://github.com/macanv/BERT-BiLSTM-CRF-NER/issues/399: PyCharm's `exit code -1073740791 (0xC0000409)`: a
    # Windows fail-fast abort.
    ("process_exit__macanv-bert-bilstm-crf-ner-399.log", "crit",
     {"reason": "0xC0000409", "status": "STATUS_STACK_BUFFER_OVERRUN"}),
    # https://github.com/PKU-YuanGroup/Video-LLaVA/issues/13: `Killed` run into a progress bar: the shell's word.
    ("process_exit__pku-yuangroup-video-llava-13.log", "warn", {"reason": "Killed", "signal_number": 9}),
])
def test_process_exits(name: str, severity: str, facts: dict[str, Any]) -> None:
    found = [f for f in diagnose(ROUND8 / name).findings if f.category == "process_exit" and f.severity == severity]
    assert found
    for key, value in facts.items():
        assert any(f.facts.get(key) == value for f in found), (key, [f.facts for f in found])


def test_the_spawned_process_index_is_the_rank() -> None:
    finding = next(f for f in diagnose(ROUND8 / "process_exit__hrnet-higherhrnet-human-pose-estimation-47.log").findings
                   if f.category == "process_exit")
    assert finding.ranks == [1]


def test_windows_status_codes_read_signed_unsigned() -> None:
    assert windows_status(-1073740791) is not None and windows_status(3221226505) == windows_status(-1073740791)
    assert windows_status(1) is None and windows_status(-9) is None and windows_status(137) is None


@pytest.mark.parametrize(("name", "facts"), [
    # https://github.com/Kyubyong/transformer/issues/77: TF1's `Ran out of GPU memory when allocating 1294336000 bytes`,
    # the GPU from the node's device on the line under it.
    ("cuda_oom__kyubyong-transformer-77.log", {"requested_bytes": 1294336000, "gpu": 0}),
    # https://github.com/AI-Hypercomputer/maxdiffusion/issues/216: NCCL's `Cuda failure 2 'out of memory'` is a GPU
    # OOM, XLA's `could not allocate collective of size: N` under it the request.
    ("cuda_oom__ai-hypercomputer-maxdiffusion-216.log", {"requested_bytes": 20289079296, "error": "out of memory"}),
    # https://github.com/PaddlePaddle/PaddleGAN/issues/587: Paddle's `21.184814GB memory has been allocated`.
    ("cuda_oom__paddlepaddle-paddlegan-587.log", {"allocated_bytes": 22747020825, "requested_bytes": 3888906055}),
])
def test_oom_sizes_in_the_allocators_words(name: str, facts: dict[str, Any]) -> None:
    result = diagnose(ROUND8 / name)
    found = [f for f in serious(result) if f.category == "cuda_oom"]
    assert found and not [f for f in serious(result) if f.category != "cuda_oom"]
    for key, value in facts.items():
        assert any(f.facts.get(key) == value for f in found), (key, [f.facts for f in found])


def test_the_gpu_of_tensorflows_allocator_by_its_name() -> None:
    # https://github.com/RuiLiFeng/Deep-Generative-Projection/issues/15: `Allocator (GPU_0_bfc) ran out of memory
    # trying to allocate 2.14GiB ... not a failure`: info, with the request and the GPU.
    finding = next(f for f in diagnose(ROUND8 / "cuda_oom__ruilifeng-deep-generative-projection-15.log").findings
                   if f.category == "cuda_oom")
    assert finding.severity == "info" and finding.facts["gpu"] == 0 and finding.facts["requested_bytes"] == 2297807503


@pytest.mark.parametrize(("name", "facts"), [
    # https://github.com/keras-team/keras-tuner/issues/442: Keras' progress bar (`   2/1500 [....] - loss: nan`).
    ("nan_inf__keras-team-keras-tuner-442.log", {"step": 2, "loss": "nan", "field": "loss"}),
    # https://github.com/JJBOY/BMN-Boundary-Matching-Network/issues/22: every non-finite field, names of two words.
    ("nan_inf__jjboy-bmn-boundary-matching-network-22.log", {"field": "pem class_loss, total_loss", "step": 0}),
])
def test_metric_fields_and_steps(name: str, facts: dict[str, Any]) -> None:
    finding = next(f for f in diagnose(ROUND8 / name).findings if f.category == "nan_inf")
    for key, value in facts.items():
        assert finding.facts.get(key) == value, (key, finding.facts)


def test_facts_printed_in_other_forms() -> None:
    # https://github.com/xdit-project/xDiT/issues/147: `[rank4]:[E ...] [PG 5 Rank 0] ... stuck for 600 seconds`: the
    # launcher's prefix is the global rank, the message's the rank in process group 5; 600 s is 600000 ms.
    finding = next(f for f in diagnose(ROUND8 / "nccl_timeout__xdit-project-xdit-147.log").findings
                   if f.rule == "watchdog_stuck")
    assert finding.ranks == [0, 4] and finding.facts["timeout_ms"] == 600000 and finding.facts["group_rank"] == 0
    # https://github.com/LianjiaTech/BELLE/issues/136: the NCCL error in ncclGetErrorString's words.
    finding = next(f for f in diagnose(ROUND8 / "nccl_init_network__lianjiatech-belle-136.log").findings
                   if f.rule == "nccl_error")
    assert finding.facts["error"] == "unhandled system error" and finding.facts["nccl_error"] == "ncclSystemError"
    # https://github.com/ofsoundof/GRL-Image-Restoration/issues/27: c10d warns per address ([::ffff:0.0.0.5]:40323)
    # and errors once all failed: that line is the error.
    finding = next(f for f in diagnose(ROUND8 / "nccl_init_network__ofsoundof-grl-image-restoration-27.log").findings
                   if f.rule == "store_connect")
    assert finding.facts["host"] == "0.0.0.5" and finding.facts["port"] == 40323
    assert finding.facts["error"] == "The client socket has failed to connect to any network address of (05, 40323)."
    # https://github.com/RangiLyu/nanodet/issues/415: the rank Lightning names once (`GLOBAL_RANK: 1`), the exception
    # of the traceback whose final line the rule matched again.
    finding = next(f for f in diagnose(ROUND8 / "nccl_init_network__rangilyu-nanodet-415.log").findings
                   if f.rule == "store_connect")
    assert finding.ranks == [1] and finding.facts["exception"] == "TimeoutError"
    # https://github.com/QwenLM/Qwen3-VL/issues/1700: a container's `... +08:00 CST (APIServer pid=1)` prefix, and the
    # 500 after the dead engine's exception takes its words.
    finding = next(f for f in diagnose(ROUND8 / "inference__qwenlm-qwen3-vl-1700.log").findings
                   if f.category == "inference")
    assert finding.facts["pid"] == 1 and finding.facts["status"] == 500
    assert finding.facts["error"] == ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                                      "See stack trace (above) for the root cause.")
    # NVIDIA developer forums topic 364958: the driver's sentence after Xid 154.
    found = diagnose(ROUND8 / "gpu_hardware__page-forums-developer-nvidia-com-364958.log").findings
    xid154 = next(f for f in found if f.facts.get("xid") == 154)
    assert xid154.facts["error"] == "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"


def test_records_run_together_are_split_where_the_first_token_comes_back() -> None:
    assert split_records("OSError: image file is truncated         OSError: Caught OSError in DataLoader worker "
                         "process 3") == ["OSError: image file is truncated",
                                          "OSError: Caught OSError in DataLoader worker process 3"]
    assert split_records("loss: 1.0 | lr: 3e-4") == ["loss: 1.0 | lr: 3e-4"]  # blanks without the token again


def test_a_header_above_frames_is_no_message(tmp_path: Path) -> None:
    # tests/data/logs/wild/nan_inf__denseuav-7.log (its manifest names the source) hard-wrapped at 80 columns: the
    # anomaly-mode header's tail ("...ceback of forward call that caused the error:") above the forward's frames
    # introduces them; it is no exception's message. The header itself is anomaly mode's report (round 11): nan_inf.
    lines = (DATA / "wild" / "nan_inf__denseuav-7.log").read_text().splitlines()
    path = tmp_path / "nan_inf__denseuav-7.log"
    path.write_text("\n".join(line[i:i + 80] for line in lines for i in range(0, max(len(line), 1), 80)) + "\n")
    assert [(f.category, f.rule, f.facts.get("op")) for f in serious(diagnose(path))] == [
        ("nan_inf", "anomaly_report", "SoftmaxBackward0")]
