"""Mechanisms written from round 17's development part (and one from round 14's; issue 31), each on the real excerpt
it was written for (source URLs in each folder's dev/cases.jsonl): the CUDA runtime's own error strings inside a
library's check, a framework's statement that a NaN occurred, Horovod's stall inspector as a hang (and as a mismatch
when the ranks wait in different collectives), XLA refusing a graph, a rank that cannot resolve its rendezvous host, an
exception whose message starts on the line below it, the store barrier still waiting for a rank, TorchScript's source
pointer, a container without its GPUs, and a negative exit code as the signal it is. The held-out parts are never read
here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.tools.logs.serious import serious_by_category
from tools.logs.reader import display_line

DATA = Path(__file__).resolve().parents[2] / "data" / "logs"


def _serious(name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return serious_by_category(DATA / name)


@pytest.mark.parametrize(("name", "category", "rule", "facts"), [
    # tiny-cuda-nn's `cudaEventRecord(m_event, m_stream) failed with error an illegal memory access was encountered`.
    ("round17/dev/cuda_error__nerfstudio-project-nerfstudio-1.log", "cuda_error", "cuda_error_string",
     {"function": "cudaEventRecord",
      "location": "/home/<user>/nerf/ngp_pl/tiny-cuda-nn/include/tiny-cuda-nn/multi_stream.h:83"}),
    # InternEvo's `Nan grad norm occurs, please check it`, quoted in the reporter's prose.
    ("round17/dev/nan_inf__InternLM-InternEvo-1.log", "nan_inf", "nan_statement",
     {"error": "Nan grad norm occurs", "field": "grad norm"}),
    # Horovod's stall inspector under mpirun's interleaved `[1,0]<stderr>:` writes: one rank stalled, a hang.
    ("round17/dev/nccl_timeout__polyaxon-polyaxon-657.log", "nccl_timeout", "horovod_stall",
     {"timeout_s": 60, "stalled_ranks": "0"}),
    # TensorFlow's XLA bridge: `Detected unsupported operations when trying to compile graph ... on XLA_CPU_JIT`.
    ("round17/dev/compile__NVlabs-gnn-decoder-1.log", "compile", "xla_compile_failed",
     {"device": "XLA_CPU_JIT", "op": "RaggedRange", "backend": "XLA"}),
    # torchelastic's `Detailed message: host not found: Name or service not known` for the rendezvous host.
    ("round17/dev/nccl_init_network__pytorch-elastic-31.log", "nccl_init_network",
     "exception_distributed_name_resolution", {"error": "host not found: Name or service not known"}),
    # torch.jit's tracer: `RuntimeError: ` and its message on the line below.
    ("round17/dev/compile__xinntao-EDVR-1.log", "compile", "exception_compile_message",
     {"exception": "RuntimeError", "message": "could not export python function call _DCNv2."}),
    # init_process_group's store barrier still waiting for a rank: worker_count 1 of world_size 2.
    ("round17/dev/nccl_init_network__uzh-rpg-RVT-18.log", "nccl_init_network", "store_barrier_waiting",
     {"joined": 1, "world_size": 2}),
    # CTranslate2's `CUDA failed with error out of memory` in faster-whisper's error line.
    ("round17/dev/cuda_oom__McCloudS-subgen-1.log", "cuda_oom", "device_alloc_failed_any",
     {"error": "CUDA failed with error out of memory"}),
    # Slurm's time limit on a line tqdm's bars ran into: the words are Slurm's, not the bars'.
    ("round17/dev/process_exit__owencqueen-PolymerGNN-1.log", "process_exit", "slurm_time_limit",
     {"error": "JOB 42196 ON <host> CANCELLED AT 2022-04-14T16:17:16 DUE TO TIME LIMIT"}),
    # PyTorch's shared-memory file `</torch_9931_...>: No space left on device`: /dev/shm is full, not a disk.
    ("round17/dev/dataloader__developerxnoxs-YoloCaptchaTrainer-1.log", "dataloader", "dataloader_shm", {}),
    # TorchScript's `~~~ <--- HERE` under `File "CosPlace\model\layers.py", line 8`, its RuntimeError line not pasted.
    ("round17/dev/compile__gmberton-CosPlace-1.log", "compile", "torchscript_source_pointer",
     {"location": "CosPlace\\model\\layers.py:8"}),
    # Apptainer's `--nv` on a host without NVIDIA libraries (round 14's development part): no GPU inside.
    ("round14/dev/cuda_error__fermat-ml-omatg-train-out.log", "cuda_error", "container_gpu_unavailable",
     {"error": "Could not find any nv files on this host!"}),
    # DIGITS' `ERROR: error code -9`: a negative code is the signal the process died on.
    ("round17/dev/process_exit__NVIDIA-DIGITS-1.log", "process_exit", "exit_code",
     {"exitcode": -9, "signal": "SIGKILL"}),
])
def test_round17_mechanism(name: str, category: str, rule: str, facts: dict[str, Any]) -> None:
    found = _serious(name)
    assert category in found, found
    assert found[category][0] == rule
    for key, value in facts.items():
        assert found[category][1].get(key) == value, (key, found[category][1])


def test_stalled_ranks_in_different_collectives_are_also_a_mismatch() -> None:
    # https://github.com/google/automl/issues/563 (round 2, development): rank 0 waits in broadcasts, rank 1 in
    # allreduces: the stall and the ranks disagreeing on which collective runs, two findings.
    found = _serious("round2/dev/nccl_timeout__google-automl-1.log")
    assert found["nccl_timeout"][0] == "horovod_stall"
    assert found["collective_mismatch"][1]["pending_ops"] == "rank 0: Broadcast; rank 1: Allreduce"
    # One rank listed (polyaxon, above): no mismatch is claimed.
    assert "collective_mismatch" not in _serious("round17/dev/nccl_timeout__polyaxon-polyaxon-657.log")


def test_a_warning_above_torchruns_failure_is_not_its_exception() -> None:
    # FasterDecoding/Medusa: a transformers FutureWarning, then torchrun's ChildFailedError and its `=====` banner.
    rule, facts = _serious("round17/dev/process_exit__FasterDecoding-Medusa-1.log")["process_exit"]
    assert rule == "child_failed" and facts["exitcode"] == -9
    assert facts["exception"] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    assert "message" not in facts and "Warning" not in str(facts["error"])


def test_colour_codes_are_not_shown_in_a_findings_text() -> None:
    # facebookresearch/audiocraft: flashy's coloured summary line, pasted with its ESC characters lost (`[36m`).
    rule, facts = _serious("round17/dev/nan_inf__facebookresearch-audiocraft-1.log")["nan_inf"]
    assert rule == "nan_grad_norm"
    assert str(facts["error"]).startswith("[05-07 13:05:33][flashy.solver][INFO] - Train Summary")
    assert display_line(b"\x1b[31mERROR\x1b[0m cuda failed") == "ERROR cuda failed"
    assert display_line(b"eta [5m] left") == "eta [5m] left"  # one code-like text alone is text


def test_a_full_dev_shm_is_not_a_full_disk() -> None:
    assert "unclassified_error" not in _serious("round17/dev/dataloader__developerxnoxs-YoloCaptchaTrainer-1.log")


def test_torchscripts_pointer_under_a_runtime_error_is_no_compile_finding() -> None:
    # https://github.com/lightaime/deep_gcns_torch/issues/90 (round 14, development): the same pointer under
    # "Traceback of TorchScript" for a CUDA OOM at run time: the OOM is the finding.
    found = _serious("round14/dev/cuda_oom__lightaime-deep_gcns_torch-90.log")
    assert "cuda_oom" in found and "compile" not in found
