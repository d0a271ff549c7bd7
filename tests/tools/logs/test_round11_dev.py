"""The mechanisms added for round 11's development part (issue 31), each on the real excerpt it was written for
(tests/data/logs/round11/dev; each excerpt's source URL is in its cases.jsonl and in the comment above its case): a
native build's failure is compile before it is an exit code, a library's failed CUDA API call is cuda_error with its
code, a crash handler's report (faulthandler, Open MPI) is a native crash with the current thread's frame, anomaly
mode's report is nan_inf, a pipe table's nan is a metric, an exception from torch.distributed's rendezvous is
nccl_init_network, DDP's reducer is collective_mismatch, TensorRT's failed build and Gaudi's graph compiler are compile,
a torch build without CUDA asked for it is cuda_error; and an fp16 loss scaler finding its scale is not a fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, diagnose_logs
from tools.logs.metrics import overflow_level

ROUND11 = Path(__file__).resolve().parents[2] / "data" / "logs" / "round11" / "dev"


def diagnose(name: str) -> DiagnoseLogsResult:
    path = ROUND11 / name
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))


def serious(result: DiagnoseLogsResult) -> list[LogFinding]:
    return [f for f in result.findings if f.severity != "info"]


@pytest.mark.parametrize(("name", "category", "rule", "facts"), [
    # https://github.com/NVlabs/tiny-cuda-nn/issues/470: setuptools' `error: command '...\nvcc' failed with exit code 1`
    # on Windows is the build's failure (native_build_error, tried before the exit-code row), its tool the file name.
    ("compile__nvlabs-tiny-cuda-nn-470.log", "compile", "native_build_error", {"tool": "nvcc", "exitcode": 1}),
    # https://github.com/isaac-sim/IsaacLab/issues/1460: PhysX's `cuEventRecord failed with error 700`.
    ("cuda_error__isaac-sim-isaaclab-1460.log", "cuda_error", "cuda_error",
     {"function": "cuEventRecord", "cuda_error_code": 700}),
    # https://github.com/ziyanx02/Genesis-backflip/issues/2: faulthandler's dump; the current thread's innermost frame
    # (printed first) is where it crashed, not the other threads' nor the outermost.
    ("process_exit__ziyanx02-genesis-backflip-2.log", "process_exit", "crash_report",
     {"error": "Fatal Python error: Segmentation fault", "signal_number": 11,
      "location": "/home/ubuntu/Genesis/examples/locomotion/Genesis-backflip/reward_wrapper.py:88"}),
    # https://github.com/mit-han-lab/bevfusion/issues/157: Open MPI's signal handler.
    ("process_exit__mit-han-lab-bevfusion-157.log", "process_exit", "crash_report",
     {"error": "Signal: Segmentation fault (11)", "signal_number": 11}),
    # https://github.com/facebookresearch/fastMRI/issues/139: anomaly mode's report, the error below it cut.
    ("nan_inf__facebookresearch-fastmri-139.log", "nan_inf", "anomaly_report", {"op": "DivBackward0"}),
    # https://github.com/openai/guided-diffusion/issues/50: the logger's `| loss | nan |` table.
    ("nan_inf__openai-guided-diffusion-50.log", "nan_inf", "metric_nonfinite",
     {"field": "loss", "nonfinite": "loss", "value": "nan"}),
    # https://github.com/xh-liu/CC-FPSE/issues/6: `RuntimeError: connect() timed out.` raised in the TCP rendezvous.
    ("nccl_init_network__xh-liu-cc-fpse-6.log", "nccl_init_network", "exception_distributed_rendezvous_frame",
     {"exception": "RuntimeError", "message": "connect() timed out.",
      "location": "/hdd/<user>/Pix2Pix/CC-FPSE/train.py:38", "op": "init_process_group", "backend": "nccl"}),
    # https://github.com/chenhang98/BPR/issues/32: an INTERNAL ASSERT of c10d/reducer.cpp (rebuilt parameter indices).
    ("collective_mismatch__chenhang98-bpr-32.log", "collective_mismatch", "exception_ddp_reducer",
     {"exception": "RuntimeError"}),
    # https://github.com/huggingface/optimum-habana/issues/1426: Gaudi's graph compiler, raised from all_gather.
    ("compile__huggingface-optimum-habana-1426.log", "compile", "exception_compile_graph_compiler",
     {"syn_status": 26, "exception": "RuntimeError"}),
    # saforem2/mmm docs/torch-on-aurora.md: a CUDA call on Intel's XPU build of torch.
    ("cuda_error__saforem2-mmm-torch-on-aurora.log", "cuda_error", "exception_cuda_no_device",
     {"exception": "AssertionError", "message": "Torch not compiled with CUDA enabled"}),
])
def test_round11_mechanism(name: str, category: str, rule: str, facts: dict[str, Any]) -> None:
    found = serious(diagnose(name))
    assert found and found[0].category == category and found[0].rule == rule, [(f.category, f.rule) for f in found]
    assert {k: found[0].facts.get(k) for k in facts} == facts


def test_tensorrt_build_failure_and_the_script_meeting_its_none_engine_are_compile() -> None:
    # https://github.com/PingoLH/CenterNet-HarDNet/issues/1: "[TensorRT] ERROR: Network validation failed.", then
    # the script's `engine.serialize()` on the None the builder returned.
    found = serious(diagnose("compile__pingolh-centernet-hardnet-1.log"))
    assert {f.category for f in found} == {"compile"}
    raised = next(f for f in found if f.rule == "exception_compile_tensorrt_build")
    assert raised.facts["location"] == "demo_trt.py:127" and raised.facts["backend"] == "TensorRT"


def test_an_fp16_scaler_finding_its_scale_is_info_and_a_collapsing_one_is_not() -> None:
    # https://github.com/thu-ml/RoboticsDiffusionTransformer/issues/43: DeepSpeed's first overflow, 2^32 -> 2^31.
    [skip] = [f for f in diagnose("benign__thu-ml-roboticsdiffusiontransformer-43.log").findings
              if f.rule == "overflow_skip"]
    assert skip.severity == "info" and skip.facts["loss_scale"] == 2147483648
    assert overflow_level("warn", {"loss_scale": 2.0}, 2) == "warn"  # fallen below the healthy range
    assert overflow_level("warn", {"loss_scale": 65536.0}, 200) == "warn"  # skips that keep coming
    assert overflow_level("warn", {}, 3) == "warn"  # the scale not printed: not cleared
    assert overflow_level("warn", {"recovered": True}, 3) == "info"  # the next lines print a finite loss
    assert overflow_level("warn", {"recovered": True}, 200) == "warn"  # but not a stream of them


def test_other_frameworks_overflow_skips_then_finite_losses_are_info(tmp_path: Path) -> None:
    # The same skip in fairseq's and DeepSpeed's loss scaler's words (their trainers' message formats), training on
    # with a finite loss on the next lines: the scaler found its scale; neither is a fault.
    fairseq = ("2024-06-01 10:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, "
               "setting loss scale to: 64.0\n"
               "2024-06-01 10:00:10 | INFO | train_inner | epoch 001:    100 / 1000 loss=9.123, nll_loss=8.5, "
               "ppl=362.1, gnorm=2.1, loss_scale=64, train_wall=32\n")
    deepspeed = ("[2024-06-01 10:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] Grad overflow on "
                 "iteration 0\n"
                 "[2024-06-01 10:00:00,001] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. "
                 "Attempted loss scale: 65536, reducing to 32768\n"
                 "steps: 10 loss: 2.3012 iter time (s): 0.410 samples/sec: 78.0\n")
    for name, text in (("fairseq.log", fairseq), ("deepspeed.log", deepspeed)):
        (tmp_path / name).write_text(text)
        result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(tmp_path,)))
        [skip] = [f for f in result.findings if f.rule == "overflow_skip"]
        assert skip.severity == "info" and skip.facts["recovered"] is True, name
    assert skip.facts["loss_scale"] == 32768


def test_a_bare_timestamp_is_a_prefix_not_the_error() -> None:
    # https://github.com/k2-fsa/ZipVoice/issues/146: `2025-10-27 18:45:39 torch.OutOfMemoryError: CUDA out of memory.`
    [oom] = serious(diagnose("cuda_oom__k2-fsa-zipvoice-146.log"))
    assert str(oom.facts["error"]).startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.72 GiB.")


def test_a_repeated_cut_chain_is_not_chained_to_the_copy_before(tmp_path: Path) -> None:
    # The CC-FPSE excerpt ends inside the traceback its "During handling of the above exception" introduced: printed
    # again and again, each copy's exception stands alone (chaining each to the one before grew the chain with every
    # copy: quadratic, and past Python's recursion limit), and its count is the number of copies.
    text = (ROUND11 / "nccl_init_network__xh-liu-cc-fpse-6.log").read_bytes()
    (tmp_path / "rank0.log").write_bytes(text * 3000)
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["rank0.log"]), ToolContext(roots=(tmp_path,)))
    [found] = serious(result)
    assert found.category == "nccl_init_network" and found.count == 3000
    assert "caused_by" not in found.facts


def test_a_long_chain_of_causes_is_kept_to_its_nearest(tmp_path: Path) -> None:
    # The CC-FPSE excerpt's first traceback, each copy chained to the one before by its own "During handling of the
    # above exception" line, 2000 deep (a retry loop re-raising): read in bounded time and memory, one finding.
    lines = (ROUND11 / "nccl_init_network__xh-liu-cc-fpse-6.log").read_text().splitlines()
    chain_at = next(i for i, line in enumerate(lines) if line.startswith("During handling"))
    first, marker = lines[3:chain_at - 1], lines[chain_at - 1:chain_at + 2]  # Traceback ... RuntimeError; the marker
    (tmp_path / "rank0.log").write_text("\n".join((first + marker) * 2000 + first) + "\n")
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["rank0.log"]), ToolContext(roots=(tmp_path,)))
    [found] = serious(result)
    assert found.category == "nccl_init_network" and found.facts["exception"] == "RuntimeError"
