"""Issue 31's mechanisms on real excerpts (tests/data/logs/round2/dev, labels and sources in its cases.jsonl): metric
values (tools/logs/metrics.py), process exits (sop/exits.toml, tools/logs/exits.py) and line repair
(tools/logs/prefixes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, LogFinding, classify, diagnose_logs
from tools.logs.exits import signal_number
from tools.logs.prefixes import anchor_after_prefix

DEV = DATA / "logs" / "round2" / "dev"


def diagnose(name: str, root: Path = DEV) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(root.resolve(),)))


def finding(result: DiagnoseLogsResult, rule: str) -> LogFinding:
    found = [f for f in result.findings if f.rule == rule]
    assert found, [(f.rule, f.severity) for f in result.findings]
    return found[0]


@pytest.mark.parametrize(("name", "rule", "severity", "facts"), [
    # Megatron's '|' table: grad norm nan, the loss scale beside it, the iteration as the step.
    ("nan_inf__megatron-deepspeed-396.log", "metric_nonfinite", "crit",
     {"step": 5426, "grad_norm": "nan", "loss_scale": 1.0, "field": "grad norm", "nonfinite": "grad_norm"}),
    # The same table wrapped by the user: the step comes from the iteration line two lines above (one line: warn).
    ("nan_inf__nvidia-nemo-megatron-bridge-5306.log", "metric_nonfinite", "warn",
     {"step": 5, "grad_norm": "nan", "loss_scale": 1.0}),
    # DINOv2's MetricLogger 'key: value (avg)': total_loss and koleo_loss inf (every non-finite field, in the line's
    # order), the step from '[ 40/5000000]'.
    ("nan_inf__dinov2-143.log", "metric_nonfinite", "crit",
     {"step": 40, "loss": "inf", "field": "total_loss, koleo_loss"}),
    # Space-separated fields: every loss_* nan at iter 4500.
    ("nan_inf__nlut-12.log", "metric_nonfinite", "crit",
     {"step": 4500, "loss": "nan", "field": "loss_mn, loss_c, loss_s, loss_mse, losses"}),
    # Prose: 'Loss is Infinity.' at [Iteration 45459].
    ("nan_inf__ipex-llm-1486.log", "metric_nonfinite", "crit", {"step": 45459, "loss": "inf"}),
    # A running average: 'grad_norm: 0.3922 (nan)' with the loss finite and the fp16 loss scale beside it.
    ("nan_inf__microsoft-unilm-598.log", "metric_nonfinite", "crit", {"grad_norm": "nan", "loss_scale": 8192.0}),
    # 'epoch: N loss: nan': the epoch stands for the step.
    ("nan_inf__gradnorm-tf-17.log", "nan_loss", "crit", {"step": 3451, "loss": "nan"}),
    # 'loss nan ... grad_norm nan rank 2': both fields, space-separated.
    ("nan_inf__qwenaudio-cosyvoice-652.log", "nan_loss", "crit", {"loss": "nan", "grad_norm": "nan"}),
    # One grad_norm inf and nothing after it: warn, not crit.
    ("nan_inf__solofusion-19.log", "nan_grad_norm", "warn", {"step": 50, "grad_norm": "inf"}),
    # DeepSpeed's loss scaler at its floor.
    ("nan_inf__deepspeedai-deepspeedexamples-418.log", "loss_scale_minimum", "crit",
     {"error": "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."}),
    # A framework's own NaN check (an exception: the run stopped) names the grad norm: crit though it is one line.
    ("nan_inf__pai-megatron-patch-366.log", "metric_nonfinite", "crit", {"grad_norm": "nan"}),
])
def test_metric_values(name: str, rule: str, severity: str, facts: dict[str, Any]) -> None:
    found = finding(diagnose(name), rule)
    assert found.category == "nan_inf" and found.severity == severity
    for key, value in facts.items():
        assert found.facts.get(key) == value, (key, found.facts)


def test_one_early_nan_grad_norm_that_recovers_is_info() -> None:
    # mmocr under fp16: grad_norm nan in the first logged window only, finite in the next (the scaler calibrating).
    result = diagnose("benign__tablemaster-mmocr-32.log")
    found = finding(result, "nan_grad_norm")
    assert found.severity == "info" and found.facts["recovered"] is True
    assert all(f.severity == "info" for f in result.findings)


def test_a_best_loss_of_inf_is_no_fault_and_finite_lines_are_not_metric_findings() -> None:
    assert classify(b"epoch 3 | best_loss: inf | loss: 0.53") is not None  # matched, then judged below
    assert classify(b"step 12 loss 2.0012 lr 3.0e-04 grad_norm 0.123 infinite_sampler=on") is None
    assert classify(b"Epoch 1: val_loss improved from inf to 0.52, saving model") is None


@pytest.mark.parametrize(("name", "rule", "severity", "facts"), [
    # Kubernetes: the yaml of lastState.terminated (exitCode above reason: OOMKilled), kubectl exec, eviction.
    ("process_exit__ray-project-kuberay-1.log", "k8s_oom_killed", "crit",
     {"exitcode": 137, "signal_number": 9, "signal": "SIGKILL"}),
    ("process_exit__jupyter-docker-stacks-1.log", "k8s_terminated", "crit", {"exitcode": 137, "signal_number": 9}),
    ("process_exit__kubeflow-kubeflow-1.log", "k8s_eviction", "crit", {"resource": "memory"}),
    # Slurm's time limit, with and without the node's name.
    ("process_exit__marbl-canu-1.log", "slurm_time_limit", "crit",
     {"host": "node023", "job": 3884617, "killed_by": "Slurm: the job's time limit"}),
    ("process_exit__zettaai-zetta-utils-1.log", "slurm_time_limit", "crit", {}),
    # The kernel's OOM killer (dmesg -T and ISO timestamps).
    ("process_exit__0jc1-py-autovod-1.log", "kernel_oom_kill", "crit", {"pid": 7899, "process": "python"}),
    ("process_exit__equinor-ert-1.log", "kernel_oom_kill", "crit", {"pid": 1440763, "process": "perl"}),
    # Ray: its memory monitor, and an actor whose worker died (pid and ip on their own lines below).
    ("process_exit__real-stanford-flingbot-1.log", "ray_oom_kill", "crit", {"pid": 4331, "host": "192.168.0.107"}),
    ("process_exit__simple-efficient-rl-factory-1.log", "ray_actor_died", "crit",
     {"pid": 20174, "host": "10.164.37.106"}),
    ("process_exit__hkust-nlp-simplerl-reason-1.log", "ray_actor_died", "crit", {"pid": 71876}),
    # mpirun and a launcher that name the signal.
    ("process_exit__paddlepaddle-paddle-1.log", "mpirun_signal", "crit",
     {"pid": 363, "host": "10.87.102.19", "signal_number": 9}),
    ("process_exit__huggingface-text-generation-inference-1.log", "signaled", "crit",
     {"signal_number": 4, "signal": "SIGILL"}),
    # SkyPilot's return-code list: the first code that is not the cleanup's 137.
    ("process_exit__skypilot-org-skypilot-1.log", "return_code_list", "warn", {"exitcode": 1}),
    ("process_exit__skypilot-org-skypilot-2.log", "return_code_list", "warn", {"exitcode": 1}),
])
def test_process_exits(name: str, rule: str, severity: str, facts: dict[str, Any]) -> None:
    found = finding(diagnose(name), rule)
    assert found.category == "process_exit" and found.severity == severity
    for key, value in facts.items():
        assert found.facts.get(key) == value, (key, found.facts)
    if name.startswith("process_exit__paddlepaddle"):
        assert found.ranks == [140]


def test_torchrun_summary_as_retyped_still_gives_rank_and_signal() -> None:
    found = finding(diagnose("process_exit__zhehengjianglancaster-amvur-1.log"), "child_failed")
    assert found.severity == "crit" and found.facts["exitcode"] == -9 and found.facts["signal_number"] == 9
    assert 2 in found.ranks


def test_an_abort_after_a_cuda_error_is_its_consequence() -> None:
    result = diagnose("cuda_error__vina-cuda-3.log")
    assert finding(result, "cuda_error").severity == "crit"
    abort = finding(result, "shell_signal")
    assert abort.severity == "info" and abort.facts["signal_number"] == 6 and abort.facts["consequence"] is True


@pytest.mark.parametrize(("printed", "number"), [
    (9, 9), (-9, 9), ("9", 9), ("SIGKILL", 9), ("Killed", 9), ("已杀死", 9), ("SIGSEGV", 11),
    ("Segmentation fault", 11), ("Bus error", 7), ("signal 4", 4), ("Aborted", 6), ("nonsense", None),
])
def test_signal_number(printed: object, number: int | None) -> None:
    assert signal_number(printed) == number


@pytest.mark.parametrize("prefix", [
    "(RayWorkerWrapper pid=123, ip=10.0.0.1) ",
    "(pid=123) ",
    "[rank3]:",
    "[default0]:",
    "2024-05-01T12:00:00.123456789Z stdout F ",
    "2024-05-01T12:00:00.123456789Z ",
    "May  1 12:00:00 gpu-node-3 kernel: ",
    "[ 1234.567890] ",
    "2024-05-01 12:00:00,123 - train - ERROR - ",
    "(pid=123) [rank3]:",
])
def test_rules_anchored_at_the_line_start_match_after_a_prefix(prefix: str) -> None:
    for line, rule in ((b"Killed", "death_signal"), (b"Segmentation fault (core dumped)", "shell_signal"),
                       (b"  exitCode: 137", "k8s_exit_code")):
        classified = classify(prefix.encode() + line)
        assert classified is not None and classified[0].id == rule, (prefix, line)
    assert classify(b"the job was Killed") is None  # not at the start of the line, after no known prefix


@pytest.mark.parametrize(("line", "rule", "command"), [
    # lmb-freiburg/demon (round 17, development): the shell's message with no space before its parenthesis.
    ("Segmentation fault(core dumped)", "shell_signal", None),
    # bash running a script: `<script>: line N: <pid> <signal>  (core dumped) <command>`.
    ("train.sh: line 12: 31337 Segmentation fault      (core dumped) python train.py --cfg x", "shell_job_report",
     "python train.py --cfg x"),
])
def test_a_shells_signal_message_in_its_forms(tmp_path: Path, line: str, rule: str, command: str | None) -> None:
    (tmp_path / "job.log").write_text("start iteration 0\n" + line + "\n")
    found = finding(diagnose("job.log", tmp_path), rule)
    assert found.facts["signal_number"] == 11 and found.facts.get("command") == command


def test_anchor_rewrites_only_line_anchors() -> None:
    assert anchor_after_prefix(r"[^x]\^a") == r"[^x]\^a"
    assert anchor_after_prefix(r"(?:^|x)a").startswith("(?:^(?:")
    assert anchor_after_prefix(r"^a", loose=True) == r"(?:^|[\s:\])>])a"


def test_a_prefixed_killed_line_in_a_file(tmp_path: Path) -> None:
    (tmp_path / "worker.log").write_text(
        "(RayWorkerWrapper pid=5521, ip=10.0.0.7) step 10 loss 1.02\n"
        "(RayWorkerWrapper pid=5521, ip=10.0.0.7) Killed\n")
    result = diagnose("worker.log", tmp_path)
    found = finding(result, "death_signal")
    assert found.category == "process_exit" and found.facts["signal_number"] == 9


ROUND5 = DATA / "logs" / "round5" / "dev"


@pytest.mark.parametrize(("name", "rule", "category", "severity", "facts"), [
    # Slurm's cgroup OOM killer, behind a wrapper's prefix and inside a workflow engine's output.
    ("process_exit__dstndstn-tractor-126.log", "slurm_oom_kill", "process_exit", "crit",
     {"step": 43622791.67, "signal": "SIGKILL"}),
    ("process_exit__snakemake-snakemake-executor-plugin-slurm-371.log", "slurm_oom_kill", "process_exit", "crit",
     {"step": "JOBID.13", "signal_number": 9}),
    # MPICH's banner with its exit code below it; Open MPI's launcher retold with a capital; gunicorn's arbiter.
    ("process_exit__cbio-cbio-cluster-256.log", "mpich_bad_termination", "process_exit", "warn", {"exitcode": 9}),
    ("process_exit__compas-grasp-118.log", "mpirun_signal", "process_exit", "crit",
     {"host": "aodexiusi", "signal": "SIGKILL"}),
    ("process_exit__natlibfi-annif-922.log", "worker_sent_signal", "process_exit", "crit",
     {"pid": 54, "exitcode": 139, "signal": "SIGSEGV"}),
    # PyTorch's OOM on ROCm and on Apple's MPS, Paddle's: the sizes in bytes, whatever the backend.
    ("cuda_oom__kyuz0-amd-strix-halo-image-video-toolboxes-3.log", "cuda_oom", "cuda_oom", "crit",
     {"total_bytes": 137438953472, "free_bytes": 818140938, "exception": "torch.OutOfMemoryError"}),
    ("cuda_oom__pharmapsychotic-clip-interrogator-ext-74.log", "cuda_oom", "cuda_oom", "crit",
     {"requested_bytes": 481369784, "max_allowed_bytes": 7269232148}),
    ("cuda_oom__paddlepaddle-paddleocr-1505.log", "cuda_oom", "cuda_oom", "crit",
     {"requested_bytes": 26216703, "free_bytes": 15925248, "gpu": 0}),  # 25.002197 MiB, truncated to bytes
    # A serving engine that cannot load its engine file or its models; vLLM's engine core dying, in words.
    ("inference__triton-inference-server-triton-cli-59.log", "exception_inference_model_load", "inference", "crit",
     {"expected_version": "9.2.0.5", "found_version": "9.3.0.1"}),
    ("inference__nvidia-ai-iot-tao-toolkit-triton-apps-11.log", "exception_inference_model_load", "inference", "crit",
     {"error": "creating server: Internal - failed to load all models"}),
    ("inference__ovg-project-kvcached-191.log", "exception_inference_engine_failed", "inference", "crit",
     {"error": "EngineCore encountered a fatal error."}),
    # torch.compile with no usable Triton (ComfyUI on Windows): the backend cannot run at all.
    ("compile__welltop-cn-comfyui-teacache-40.log", "exception_compile_toolchain_missing", "compile", "crit",
     {"exception": "RuntimeError"}),
])
def test_round5_forms(name: str, rule: str, category: str, severity: str, facts: dict[str, Any]) -> None:
    found = finding(diagnose(name, ROUND5), rule)
    assert (found.category, found.severity) == (category, severity)
    for key, value in facts.items():
        assert found.facts.get(key) == value, (key, found.facts)


@pytest.mark.parametrize(("line", "rule", "category"), [
    # nvidia-smi's and NVML's own fixed sentences (driver not loaded, library and module differ, no GPU), the ERR!
    # of a sensor it cannot read, nvidia-smi -q's clock event reasons; PyTorch's no-device messages.
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
     "driver is installed and running.", "gpu_driver_unreachable", "gpu_hardware"),
    ("Failed to initialize NVML: Driver/library version mismatch", "gpu_driver_unreachable", "gpu_hardware"),
    ("No devices were found", "gpu_driver_unreachable", "gpu_hardware"),
    ("| ERR!   ERR! ERR!    ERR! / ERR!  |      0MiB / 11019MiB |    ERR!      Default |", "gpu_unreadable_fields",
     "gpu_hardware"),
    ("        HW Slowdown                       : Active", "gpu_hw_slowdown", "gpu_hardware"),
    ("        HW Slowdown                       : Not Active", None, None),
    ("RuntimeError: No CUDA GPUs are available", None, None),  # the exception taxonomy's (cuda_no_device), below
])
def test_gpu_driver_and_board_lines(line: str, rule: str | None, category: str | None) -> None:
    classified = classify(line.encode())
    if rule is None:
        assert classified is None or classified[0].category != "gpu_hardware"
        return
    assert classified is not None and (classified[0].id, classified[0].category) == (rule, category)


def test_no_visible_gpu_is_a_cuda_error(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
                                      '    model.cuda()\nRuntimeError: No CUDA GPUs are available\n')
    [found] = [f for f in diagnose("job.log", tmp_path).findings if f.severity != "info"]
    assert (found.category, found.rule, found.severity) == ("cuda_error", "exception_cuda_no_device", "crit")


def test_a_shard_that_crashed_is_the_cause_of_the_server_not_starting() -> None:
    # TGI (round2/dev): the shard dies on SIGILL, then the launcher says ShardCannotStart. The crash is the cause
    # (it stays crit); the server's start failure is its consequence, an inference finding of its own.
    result = diagnose("process_exit__huggingface-text-generation-inference-1.log")
    crash = finding(result, "signaled")
    assert crash.severity == "crit" and crash.facts["signal"] == "SIGILL" and "consequence" not in crash.facts
    assert finding(result, "exception_inference_server_start").category == "inference"


def test_dataloader_workers_that_cannot_start_on_spawn(tmp_path: Path) -> None:
    # Python's own multiprocessing message when a script without a __main__ guard starts DataLoader workers on
    # Windows (spawn), as it prints it (an error line of the launcher's log).
    (tmp_path / "train.log").write_text(
        "ERROR: RuntimeError: An attempt has been made to start a new process before the current process has "
        "finished its bootstrapping phase.\n")
    [found] = [f for f in diagnose("train.log", tmp_path).findings if f.severity != "info"]
    assert (found.category, found.severity) == ("dataloader", "crit")


def test_the_kubelets_restart_back_off_event_is_a_container_that_keeps_dying(tmp_path: Path) -> None:
    (tmp_path / "events.log").write_text(
        "Warning  BackOff  3m (x12 over 10m)  kubelet  Back-off restarting failed container trainer in pod "
        "trainer-0_default(8c1f)\n")
    found = finding(diagnose("events.log", tmp_path), "k8s_terminated")
    assert (found.severity, found.facts["container"]) == ("warn", "trainer")
