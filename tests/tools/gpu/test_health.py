"""health_check through the real CLI process, with NVML stood in by tests/fakes/nvml/pynvml.py (no GPU in
CI; the fake has pynvml's functions, units and errors). The GPU processes are real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import base_env, h100, run_cli, with_fake_nvml, write_scenario


@pytest.fixture
def two_processes() -> Iterator[tuple[int, int]]:
    """A 'job' process and an unrelated 'intruder', both real and alive during the test."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    job = subprocess.Popen(sleeper)
    intruder = subprocess.Popen(sleeper, start_new_session=True)
    try:
        yield job.pid, intruder.pid
    finally:
        for proc in (job, intruder):
            proc.kill()
            proc.wait()


def _health(env: dict[str, str], *args: str) -> tuple[int, dict]:
    done = run_cli(["health-check", "--json", "--sample-s", "0.2", "--no-include-kernel-log", *args], env)
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def _finding(data: dict, check: str) -> dict:
    matches = [f for f in data["findings"] if f["check"] == check]
    assert len(matches) == 1, (check, [f["check"] for f in data["findings"]])
    return matches[0]


def test_each_gpu_fault_produces_its_finding(tmp_path: Path, two_processes: tuple[int, int]) -> None:
    job, intruder = two_processes
    scenario = write_scenario(tmp_path / "nvml.json", [
        h100(processes=[{"pid": job, "used_mib": 60000}]),
        # Hot and thermally throttled, its SM clock pulled down while busy.
        h100(bus_id="00000000:2A:00.0", temperature=91, sm_clock=1305, throttle_mask=0x40 | 0x20,
             processes=[{"pid": job, "used_mib": 60000}]),
        # Link trained at x8 and Gen4 while busy.
        h100(bus_id="00000000:3A:00.0", pcie_width=8, pcie_gen=4, processes=[{"pid": job, "used_mib": 60000}]),
        # Uncorrectable ECC with a row remap pending, and a foreign process.
        h100(bus_id="00000000:5D:00.0", ecc_uncorrected=2, remapped=[0, 2, 1, 0],
             processes=[{"pid": job, "used_mib": 60000}, {"pid": intruder, "used_mib": 4096}]),
    ])
    env = with_fake_nvml(base_env(), scenario)
    code, data = _health(env, "--job-pids", str(job))
    assert code == 2  # critical findings
    assert data["nvml"] == "ok" and data["driver_version"] == "550.54.15" and data["cuda_driver_version"] == "12.4"
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2, 3]

    temp = _finding(data, "GPU 1 temperature")
    assert (temp["value"], temp["severity"], temp["sop_branch"]) == ("91 C", "crit", "straggler")
    throttle = _finding(data, "GPU 1 clock throttle")
    assert throttle["severity"] == "crit" and throttle["value"] == "sw_thermal_slowdown,hw_thermal_slowdown"
    clock = _finding(data, "GPU 1 SM clock")
    assert clock["severity"] == "warn" and clock["value"] == "1305/1980 MHz (66%)"

    width = _finding(data, "GPU 2 PCIe width")
    assert (width["value"], width["severity"], width["sop_branch"]) == ("x8 of x16", "crit", "gpu_hardware")
    gen = _finding(data, "GPU 2 PCIe generation")
    assert (gen["value"], gen["severity"]) == ("Gen4 of Gen5", "warn")

    ecc = _finding(data, "GPU 3 ECC uncorrected (volatile)")
    assert (ecc["value"], ecc["severity"]) == ("2", "crit")
    repair = _finding(data, "GPU 3 memory repair")
    assert repair["severity"] == "crit" and "row remap" in repair["value"]
    foreign = _finding(data, "GPU 3 other processes")
    assert foreign["severity"] == "warn" and f"[{intruder}]" in foreign["value"]
    procs = {(p["gpu_index"], p["pid"]): p for p in data["gpu_processes"]}
    assert procs[(3, intruder)]["foreign"] is True and procs[(3, job)]["foreign"] is False
    assert procs[(0, job)]["used_memory_mib"] == 60000

    # Checks that pass everywhere fold into one row; GPU 0 has no row of its own.
    assert _finding(data, "GPU 0,2-3 temperature")["severity"] == "ok"
    assert not [f for f in data["findings"] if f["check"].startswith("GPU 0 ")]
    # Worst first, and the verdict names the worst.
    severities = [f["severity"] for f in data["findings"]]
    assert severities == sorted(severities, key=["crit", "warn", "ok"].index)
    assert "critical" in data["conclusion"][1]
    assert [s["branch"] for s in data["next_steps"]][:2] == ["straggler", "gpu_hardware"]


def test_healthy_gpus_exit_zero_and_power_cap_is_a_warning(tmp_path: Path) -> None:
    healthy = write_scenario(tmp_path / "ok.json", [h100(), h100(bus_id="00000000:2A:00.0")])
    code, data = _health(with_fake_nvml(base_env(), healthy))
    gpu_rows = [f for f in data["findings"] if f["check"].startswith("GPU")]
    assert all(f["severity"] == "ok" for f in gpu_rows)
    # The exit code is the worst severity (host rows may warn on a busy CI machine); both sources were read, so
    # the verdict is a judged one, never unknown.
    assert code == {"ok": 0, "warn": 1, "crit": 2}[data["severity"]]
    assert [(c["input"], c["status"]) for c in data["coverage"]] == [("NVML", "read"), ("/proc", "read")]
    assert data["coverage"][0]["detail"] == "2 GPU(s), driver 550.54.15" and data["decides"] is None

    capped = write_scenario(tmp_path / "cap.json", [h100(power_w=699.0, throttle_mask=0x4, sm_clock=1755)])
    code, data = _health(with_fake_nvml(base_env(), capped))
    assert code >= 1
    assert _finding(data, "GPU 0 clock throttle")["severity"] == "warn"
    assert _finding(data, "GPU 0 power")["value"] == "699/700 W"


def test_unsupported_nvml_fields_are_missing_not_zero(tmp_path: Path) -> None:
    # Consumer GPUs answer Not Supported for ECC and memory repair.
    scenario = write_scenario(tmp_path / "s.json", [h100(
        name="NVIDIA GeForce RTX 4090", ecc_uncorrected="NOT_SUPPORTED", remapped="NOT_SUPPORTED",
        retired_pending="NOT_SUPPORTED", retired_sbe="NOT_SUPPORTED")])
    _, data = _health(with_fake_nvml(base_env(), scenario))
    gpu = data["gpus"][0]
    assert gpu["ecc_uncorrected_volatile"] is None and gpu["remapped_rows_pending"] is None
    assert gpu["unavailable"]["ecc_uncorrected_volatile"] == "Not Supported"
    assert not [f for f in data["findings"] if "ECC" in f["check"] or "memory repair" in f["check"]]


def test_no_driver_is_one_row_the_gpu_part_unknown_and_the_host_part_still_runs() -> None:
    # The real nvidia-ml-py on a host without the NVIDIA driver (this machine): nothing that would show a GPU fault
    # was read, so the verdict is unknown (exit 4), or warn when this busy machine's host rows warn.
    done = run_cli(["health-check", "--json", "--sample-s", "0.2"], base_env())
    data = json.loads(done.stdout)
    assert (done.returncode, data["severity"]) in ((4, "unknown"), (1, "warn")), done.stderr
    assert data["nvml"] == "unavailable: NVML Shared Library Not Found"
    [nvml_row] = [f for f in data["findings"] if f["check"] == "NVML"]
    assert "NVML unavailable" in nvml_row["value"] and nvml_row["severity"] == "unknown"
    coverage = {c["input"]: c for c in data["coverage"]}
    assert coverage["NVML"]["status"] == "not_understood"
    assert coverage["NVML"]["detail"].startswith("unavailable: NVML Shared Library Not Found: no GPU was read")
    assert coverage["/proc"]["status"] == "read"
    assert data["conclusion"][0] == ("NVML unavailable: NVML Shared Library Not Found: GPU health cannot be judged "
                                     "here; only the host was checked.")
    if data["severity"] == "unknown":
        assert "NVML sees the job's GPUs" in data["decides"]
    assert data["host"]["memory_total_mib"] > 0 and len(data["host"]["cpu_per_core_pct"]) >= 1
    assert data["kernel_log"] == "scanned" or data["kernel_log"].startswith("unreadable: ")


def test_an_unreadable_kernel_log_leaves_the_xid_history_unjudged(tmp_path: Path) -> None:
    # A node without dmesg on PATH (a minimal container): NVML shows healthy GPUs now, but an Xid the driver
    # logged earlier cannot be seen, so the node is not called healthy.
    healthy = write_scenario(tmp_path / "ok.json", [h100()])
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    done = run_cli(["health-check", "--json", "--sample-s", "0.2", "--top-processes", "0"],
                   with_fake_nvml(base_env(PATH=str(empty_bin)), healthy))
    data = json.loads(done.stdout)
    assert data["kernel_log"].startswith("unreadable: ") and "dmesg" in data["kernel_log"]
    coverage = {c["input"]: c["status"] for c in data["coverage"]}
    assert coverage == {"NVML": "read", "/proc": "read", "kernel log (dmesg)": "not_understood"}
    assert _finding(data, "kernel log")["severity"] == "unknown"
    assert (done.returncode, data["severity"]) in ((4, "unknown"), (1, "warn"))
    if data["severity"] == "unknown":
        assert data["conclusion"][1] == "Not judged: kernel log; every check read passes."
        assert "NVRM: Xid" in data["decides"]


def test_a_job_level_verdict_names_the_silent_node_and_the_node_without_nvml(tmp_path: Path) -> None:
    # Real collector answers (the CLI's --local mode): one node with a healthy H100, one without a driver;
    # a third node never answered. The job is not healthy for any of the two it could not judge.
    from tools.gpu.health import HealthCheckResult, _merge_nodes

    write_scenario(tmp_path / "nvml.json", [h100()])
    args = ["health-check", "--local", "--json", "--top-processes", "0", "--no-include-kernel-log", "--sample-s",
            "0.2"]
    with_gpu = HealthCheckResult.model_validate_json(
        run_cli(args, with_fake_nvml(base_env(), tmp_path / "nvml.json")).stdout)
    no_driver = HealthCheckResult.model_validate_json(run_cli(args, base_env()).stdout)
    for answer in (with_gpu, no_driver):  # this shared machine's host load is no part of the question
        answer.findings = [f for f in answer.findings if f.check.startswith(("GPU", "NVML"))]
    result = _merge_nodes("Slurm job 7", {"node01": with_gpu, "node02": no_driver,
                                          "node03": "no answer within 23 s (node hung, overloaded or unreachable)"})
    coverage = {c.input: (c.status.value, c.detail) for c in result.coverage}
    assert coverage["node01"][0] == "read"
    assert coverage["node02"][0] == "partial" and coverage["node02"][1].startswith("NVML: unavailable: NVML Shared")
    assert coverage["node03"] == ("not_understood", "no answer: no answer within 23 s (node hung, overloaded or "
                                  "unreachable)")
    assert result.severity.value == "warn"  # the silent node: never ok
    rows = {r.node: r.status for r in result.nodes}
    assert rows == {"node03": "no_answer", "node02": "unknown", "1 other node(s)": "ok"}
    # Without the silent node, the node without NVML keeps the job from ok.
    quiet = _merge_nodes("Slurm job 7", {"node01": with_gpu, "node02": no_driver})
    assert quiet.severity.value == "unknown" and "node02" in (quiet.decides or "")
    both = _merge_nodes("Slurm job 7", {"node01": with_gpu, "node04": with_gpu})
    assert both.severity.value == "ok" and [c.status.value for c in both.coverage] == ["read", "read"]


def test_secrets_in_command_lines_are_redacted(tmp_path: Path) -> None:
    token = "hf_" + "Q" * 30
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass", "--hf-token", token,
                             "WANDB_API_KEY=abc123secretvalue"])
    try:
        done = run_cli(["health-check", "--sample-s", "0.5", "--top-processes", "50"], base_env())
        both = done.stdout + run_cli(["health-check", "--json", "--sample-s", "0.5", "--top-processes", "50"],
                                     base_env()).stdout
    finally:
        busy.kill()
        busy.wait()
    assert "while True: pass" in both  # the process is listed ...
    assert token not in both and "abc123secretvalue" not in both  # ... without its secrets
    assert "--hf-token [REDACTED]" in both and "WANDB_API_KEY=[REDACTED]" in both


def test_kernel_log_lost_gpu_with_and_without_xid() -> None:
    from tests.helpers import DATA
    from tools.gpu.health import kernel_findings, parse_kernel_log

    multi_line = parse_kernel_log((DATA / "kernel_log" / "nvsentinel_155_fallen_off_bus.txt").read_text())
    assert [(e.xid, e.severity.value) for e in multi_line][:1] == [(79, "crit")]
    assert "fallen off the bus" in multi_line[0].line
    assert all(e.xid is None for e in multi_line[1:])  # probe/loading lines are context, not faults
    xid_line = parse_kernel_log((DATA / "kernel_log" / "nvsentinel_155_xid79.txt").read_text())
    assert [(e.xid, e.severity.value) for e in xid_line] == [(79, "crit")]
    finding = kernel_findings(multi_line + xid_line)
    assert [(f.check, f.value, f.severity.value, f.sop_branch) for f in finding] == [
        ("kernel log Xid 79", "2 line(s)", "crit", "gpu_hardware")]
    assert finding[0].meaning == "GPU has fallen off the bus"
