"""gpu_activity and health_check's GPM part: what the SMs do beside utilization.gpu.

Saved inputs are real public captures (tests/data/activity/PROVENANCE.md): dcgmi dmon from NVIDIA's Triton-on-GKE
sample and an H800 NVLink walkthrough, dcgm-exporter pages from NVIDIA's docs. The live path goes through the NVML
stand-in (tests/fakes/nvml/pynvml.py; no GPU in CI) with GPM values given in the scenario. They are not recorded
on a GPU: no device was lent yet, and scripts/gpu_check.sh is where the real ones get recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DATA, base_env, h100, run_cli, stdio_client, with_fake_nvml, write_scenario
from tools.gpu.activity import GpuActivity, activity_findings, summarise
from tools.gpu.activity_formats import ActivitySeries, read_activity

ACTIVITY = DATA / "activity"


def _read(*names: str) -> list[GpuActivity]:
    into: dict[tuple[str, ...], ActivitySeries] = {}
    for name in names:
        read_activity((ACTIVITY / name).read_text(), into, name)
    return [summarise(s) for s in into.values()]


def test_triton_resnet_one_instance_is_busy_but_its_sms_are_half_filled() -> None:
    # NVIDIA's sample: "GPU utilisation 79-93 %, yet ~60 % SM active" is why it runs more model instances.
    [gpu] = _read("dcgmi_dmon_nvidia-gcp-samples_resnet1inst_1.txt")
    assert (gpu.gpu, gpu.source) == ("2", "dcgmi_dmon")
    assert gpu.utilization_gpu_pct is not None and gpu.utilization_gpu_pct.median == 92
    assert gpu.sm_active is not None and (gpu.sm_active.min, gpu.sm_active.max) == (0.553, 0.652)
    assert gpu.pcie_rx_bytes_per_s is not None and gpu.pcie_rx_bytes_per_s.median == 1988613613
    assert "nvlink_tx_bytes_per_s" in gpu.unavailable and gpu.nvlink_tx_bytes_per_s is None
    [finding] = activity_findings([gpu])
    assert finding.kind == "low_sm_activity" and finding.severity.value == "warn"
    assert "utilization.gpu 92 %" in finding.evidence and "SM active 0.56" in finding.evidence


@pytest.mark.parametrize("name", ["dcgmi_dmon_nvidia-gcp-samples_resnet4inst_2.txt",
                                  "dcgmi_dmon_nvidia-gcp-samples_bert_3.txt"])
def test_well_filled_sms_give_no_finding(name: str) -> None:
    # Four ResNet instances (SM active median 0.83) and BERT (0.99): the remedy worked, nothing to flag.
    [gpu] = _read(name)
    assert gpu.sm_active is not None and gpu.sm_active.median >= 0.8
    assert activity_findings([gpu]) == []


def test_nvlink_rates_of_eight_h800s_are_bytes_per_second_and_na_is_no_value() -> None:
    gpus = _read("dcgmi_dmon_llm-action_3.txt")
    assert sorted(g.gpu for g in gpus) == [str(i) for i in range(8)]
    gpu7 = next(g for g in gpus if g.gpu == "7")
    tx = gpu7.nvlink_tx_bytes_per_s
    assert tx is not None and 25e9 < tx.median < 35e9 and tx.samples >= 2
    # Warming up, dcgmi prints N/A: those samples are missing, not zeros.
    [idle] = _read("dcgmi_dmon_llm-action_1.txt")
    assert idle.pcie_tx_bytes_per_s is not None and idle.pcie_tx_bytes_per_s.samples == 3
    assert idle.pcie_tx_bytes_per_s.min == 449138


def test_exporter_page_with_a_mig_instance_keeps_the_gpu_and_the_instance_apart() -> None:
    gpus = {g.instance: g for g in _read("exporter_nvidia-cloud-native-docs_mig_1.prom")}
    assert set(gpus) == {None, "GPU-I 13 1g.5gb"}
    whole, instance = gpus[None], gpus["GPU-I 13 1g.5gb"]
    assert whole.host == "ub20-a100-k8s" and whole.gpu == "0"
    assert whole.tensor_active is not None and whole.tensor_active.median == pytest.approx(0.93, abs=0.01)
    assert instance.dram_active is not None and instance.dram_active.median == pytest.approx(0.80, abs=0.01)
    # This page has no SM_ACTIVE and no GPU_UTIL: named, not zero.
    assert {"sm_active", "utilization_gpu_pct"} <= set(whole.unavailable)


def test_a_pasted_page_with_elisions_is_read_and_the_left_out_lines_counted() -> None:
    into: dict[tuple[str, ...], ActivitySeries] = {}
    notes = read_activity((ACTIVITY / "exporter_nvidia-cloud-native-docs_devonly_2.prom").read_text(), into, "p")
    assert notes == ["p: 2 line(s) that are no Prometheus sample were left out."]
    assert into == {}  # clocks and temperatures only: no activity metric


def _cli(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = run_cli(["gpu-activity", "--json", *args], env or base_env())
    assert done.stderr == "", done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_cli_reads_every_layout_at_once() -> None:
    data = _cli("dcgmi_dmon_*.txt", "exporter_*.prom", "--root", str(ACTIVITY))
    assert {g["source"] for g in data["gpus"]} == {"dcgmi_dmon", "dcgm_exporter"}
    assert [f["kind"] for f in data["findings"]] == ["low_sm_activity"]
    assert data["severity"] == "warn" and len(data["sources"]) == 9


def _gpm(sm: float, tensor: float, dram: float, pcie_mib_s: float = 100.0, nvlink_mib_s: float = 20000.0,
         fp32: float = 10.0) -> dict[str, float]:
    """GPM metric id -> value as NVML gives it (percent; MiB/s for the rates)."""
    return {"1": 99.0, "2": sm, "3": sm / 3, "5": tensor, "7": tensor, "10": dram, "11": 0.0, "12": fp32,
            "13": 5.0, "20": pcie_mib_s / 2, "21": pcie_mib_s / 2, "60": nvlink_mib_s / 2, "61": nvlink_mib_s / 2}


def _node(tmp_path: Path) -> Path:
    return write_scenario(tmp_path / "nvml.json", [
        h100(util_gpu=100, gpm=_gpm(sm=20.0, tensor=8.0, dram=20.0)),  # small kernels: 100 % util, 20 % SM active
        h100(util_gpu=97, gpm=_gpm(sm=92.0, tensor=1.0, dram=30.0, fp32=60.0)),  # fp32 GEMMs, no tensor cores
        h100(util_gpu=99, gpm=_gpm(sm=85.0, tensor=10.0, dram=88.0)),  # memory-bound
        h100(util_gpu=98, gpm=_gpm(sm=90.0, tensor=60.0, dram=40.0, pcie_mib_s=4000.0, nvlink_mib_s=0.0)),
        h100(name="NVIDIA A100-SXM4-80GB", util_gpu=95),  # no "gpm": pre-Hopper, GPM unsupported
    ])


def test_live_gpm_gives_each_verdict_and_an_unsupported_gpu_says_so(tmp_path: Path) -> None:
    data = _cli("--samples", "2", "--interval-s", "0.2", "--root", str(tmp_path),
                env=with_fake_nvml(base_env(), _node(tmp_path)))
    kinds = {(f["kind"], f["gpu"]) for f in data["findings"]}
    assert kinds == {("low_sm_activity", "GPU 0"), ("no_tensor_cores", "GPU 1"), ("memory_bound", "GPU 2"),
                     ("nvlink_idle", "GPU 3"), ("gpu_below_node", "GPU 0")}
    first = data["findings"][0]
    assert first["kind"] == "low_sm_activity" and first["severity"] == "crit"
    gpu0 = data["gpus"][0]
    assert gpu0["source"] == "nvml_gpm" and gpu0["sm_active"]["median"] == pytest.approx(0.2)
    assert gpu0["pcie_tx_bytes_per_s"]["median"] == pytest.approx(50 * 2**20)
    assert gpu0["sm_active"]["samples"] == 2 and gpu0["unavailable"] == []
    a100 = data["gpus"][4]
    assert a100["support"].startswith("NVML GPM is not supported on this GPU") and a100["sm_active"] is None
    assert "sm_active" in a100["unavailable"] and a100["utilization_gpu_pct"]["median"] == 95


@pytest.mark.anyio
async def test_health_check_over_mcp_quotes_both_numbers_of_the_small_kernel_gpu(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "nvml.json", [h100(util_gpu=100, gpm=_gpm(sm=20.0, tensor=8.0, dram=20.0))])
    async with stdio_client(with_fake_nvml(base_env(), scenario), "--root", str(tmp_path)) as client:
        result = await client.call_tool("health_check", {"sample_s": 0.3, "include_kernel_log": False})
    assert result.is_error is False, result.content[0].text
    data = result.structured_content
    [row] = [f for f in data["findings"] if f["check"] == "GPU 0 low sm activity"]
    assert row["severity"] == "crit" and row["sop_branch"] == "gpu_utilization_low"
    assert row["threshold"] == "SM active >= 0.8 (< 0.5 poor) when utilization >= 80 %"
    assert "utilization.gpu 100 %" in row["value"] and "SM active 0.20" in row["value"]
    assert data["activity"][0]["sm_active"]["median"] == pytest.approx(0.2)
    assert "utilization.gpu 100 % but SM active 0.20" in result.content[0].text


def test_smi_dmon_gpm_columns_are_percent_and_the_first_samples_are_no_value(tmp_path: Path) -> None:
    # Hand-written in the layout of the one public `nvidia-smi dmon --gpm-metrics` output found (leimao.github.io,
    # no licence, so not committed): a names line, a units line with GPM:%, `-` until GPM has two samples.
    (tmp_path / "dmon.txt").write_text(
        "# gpu    pwr  gtemp     sm    mem   mclk   pclk      gract     smutil     smocc     anyten\n"
        "# Idx      W      C      %      %    MHz    MHz      GPM:%      GPM:%      GPM:%      GPM:%\n"
        "    0    310     55    100     40   2619   1980          -          -          -          -\n"
        "    0    312     55    100     41   2619   1980         97         21          9          0\n"
        "    0    309     56    100     40   2619   1980         98         19          8          0\n")
    data = _cli("dmon.txt", "--root", str(tmp_path))
    [gpu] = data["gpus"]
    assert gpu["source"] == "smi_dmon_gpm" and gpu["sm_active"]["samples"] == 2
    assert gpu["sm_active"]["median"] == pytest.approx(0.20) and gpu["utilization_gpu_pct"]["median"] == 100
    assert data["findings"][0]["kind"] == "low_sm_activity"
    (tmp_path / "plain.txt").write_text("# gpu    pwr     sm    mem\n# Idx      W      %      %\n"
                                        "    0    310    100     40\n")
    refused = run_cli(["gpu-activity", "plain.txt", "--root", str(tmp_path)], base_env())
    assert refused.returncode == 3 and "has no GPM column" in refused.stderr


def test_a_dcgm_exporter_page_is_scraped_on_loopback_into_a_series() -> None:
    import http.server
    import threading

    page = (ACTIVITY / "exporter_nvidia-cloud-native-docs_mig_1.prom").read_bytes()

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        data = _cli("--url", url, "--samples", "3", "--interval-s", "0.1", "--root", str(ACTIVITY))
    finally:
        server.shutdown()
        server.server_close()
    whole = next(g for g in data["gpus"] if g["instance"] is None)
    assert whole["source"] == "dcgm_exporter" and whole["tensor_active"]["samples"] == 3
    assert data["sources"] == [url]


def test_an_exporter_that_never_answers_ends_at_the_deadline_and_an_oversized_sampling_is_refused() -> None:
    import socket
    import time

    with socket.socket() as silent:  # accepts (the kernel does), never sends a byte
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
        started = time.monotonic()
        done = run_cli(["gpu-activity", "--url", url, "--samples", "1", "--timeout", "3", "--root", str(ACTIVITY)],
                       base_env())
        took = time.monotonic() - started
    assert done.returncode == 3 and took < 8, (took, done.stderr)
    assert "did not answer" in done.stderr or "did not finish within 3 s" in done.stderr, done.stderr
    oversized = run_cli(["gpu-activity", "--url", url, "--samples", "30", "--interval-s", "10", "--root",
                         str(ACTIVITY)], base_env())
    assert oversized.returncode == 3
    assert "samples x interval_s = 300 s does not fit the call's 60 s" in oversized.stderr, oversized.stderr


def _cli_code(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    done = run_cli(["gpu-activity", "--json", *args], env or base_env())
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def test_well_filled_sms_are_ok_with_the_capture_read() -> None:
    code, data = _cli_code("dcgmi_dmon_nvidia-gcp-samples_resnet4inst_2.txt", "--root", str(ACTIVITY))
    assert (code, data["severity"], data["decides"]) == (0, "ok", None)
    assert data["coverage"] == [{"input": "dcgmi_dmon_nvidia-gcp-samples_resnet4inst_2.txt", "status": "read",
                                 "detail": "1 GPU(s) or instance(s), 7 metric(s)", "formats_known": None}]


def test_an_exporter_page_without_activity_metrics_cannot_tell() -> None:
    # NVIDIA's docs page of a default exporter: clocks, temperatures, power; no DCGM_FI_PROF_* and no GPU_UTIL.
    code, data = _cli_code("exporter_nvidia-cloud-native-docs_devonly_2.prom", "--root", str(ACTIVITY))
    assert (code, data["severity"]) == (4, "unknown")
    [entry] = data["coverage"]
    assert entry["status"] == "not_understood" and entry["detail"].startswith("no activity value of any GPU")
    assert any("dcgmi dmon" in f for f in entry["formats_known"])
    assert "DCGM_FI_PROF_SM_ACTIVE" in data["decides"]


def test_inputs_without_sm_activity_are_read_in_part_and_ok_only_where_a_verdict_was_possible() -> None:
    # The MIG page has tensor and DRAM activity but no SM_ACTIVE: memory_bound could have shown, low_sm_activity
    # could not; the ok is partial and the conclusion says what is missing.
    code, data = _cli_code("exporter_nvidia-cloud-native-docs_mig_1.prom", "--root", str(ACTIVITY))
    assert (code, data["severity"], data["findings"]) == (0, "ok", [])
    [entry] = data["coverage"]
    assert entry["status"] == "partial" and "no SM activity" in entry["detail"]
    assert data["conclusion"][0].startswith("The input has no SM activity")
    # NVLink rates alone (8 H800s of the llm-action walkthrough, NVLTX / NVLRX): no verdict reads them without PCIe.
    code, data = _cli_code("dcgmi_dmon_llm-action_3.txt", "--root", str(ACTIVITY))
    assert (code, data["severity"], data["findings"]) == (4, "unknown", [])
    [entry] = data["coverage"]
    assert entry["status"] == "partial" and entry["detail"].startswith("8 GPU(s) or instance(s), 2 metric(s)")
    assert "DCGM_FI_PROF_SM_ACTIVE" in data["decides"]


def test_a_capture_of_other_fields_and_a_page_of_comments(tmp_path: Path) -> None:
    # `dcgmi dmon -e 150,155` (temperature, power) in dcgmi's layout: a capture, but of nothing gpu_activity reads.
    (tmp_path / "dmon_power.txt").write_text("#Entity   TMPTR  POWER\nID\nGPU 0     41     67.512\n"
                                             "GPU 0     41     67.830\n")
    (tmp_path / "resnet.txt").write_text((ACTIVITY / "dcgmi_dmon_nvidia-gcp-samples_resnet4inst_2.txt").read_text())
    code, data = _cli_code("dmon_power.txt", "resnet.txt", "--root", str(tmp_path))
    assert (code, data["severity"]) == (4, "unknown")
    assert [(c["input"], c["status"]) for c in data["coverage"]] == [("dmon_power.txt", "not_understood"),
                                                                     ("resnet.txt", "read")]
    assert data["conclusion"][0] == "Cannot judge every input: dmon_power.txt held no activity value."
    (tmp_path / "empty.prom").write_text("# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has at least 1 warp.\n"
                                         "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n")
    refused = run_cli(["gpu-activity", "empty.prom", "--root", str(tmp_path)], base_env())
    assert refused.returncode == 3 and "holds no sample" in refused.stderr


def test_live_gpus_without_gpm_cannot_tell_and_a_mixed_node_is_partial(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "a100.json", [h100(name="NVIDIA A100-SXM4-80GB", util_gpu=95)])
    code, data = _cli_code("--samples", "1", "--interval-s", "0.2", env=with_fake_nvml(base_env(), scenario))
    assert (code, data["severity"]) == (4, "unknown")
    assert data["coverage"][0]["input"] == "NVML GPM" and data["coverage"][0]["status"] == "not_understood"
    assert data["coverage"][0]["detail"].startswith("NVML GPM is not supported on this GPU")
    _, mixed = _cli_code("--samples", "2", "--interval-s", "0.2", "--root", str(tmp_path),
                         env=with_fake_nvml(base_env(), _node(tmp_path)))
    assert mixed["coverage"] == [{"input": "NVML GPM", "status": "partial", "formats_known": None,
                                  "detail": "4 of 5 GPUs, 2 sample(s); no GPM on GPU 4"}]
    assert mixed["severity"] == "crit"
