"""nvidia_smi_query: the CSV parser on real recorded captures (tests/data/nvidia_smi, PROVENANCE.md),
the nvidia-smi stand-in (real output replayed; no GPU in CI) and the NVML fallback."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA, H200, RTX2080S, base_env, h100, run_cli, with_fake_nvml, with_fake_smi, write_scenario
from tools.core.context import ToolContext
from tools.core.errors import BadInput, UnreadableInput
from tools.core.limits import SMI_MAX_ROWS_RETURNED
from tools.gpu.smi_query import NvidiaSmiQueryInput, nvidia_smi_query, parse_smi_csv

SMI = DATA / "nvidia_smi"


def test_header_with_units_and_many_gpus() -> None:
    fields, rows = parse_smi_csv((SMI / "query_gpu_gtx1060_1080ti_5gpu_header_units.csv").read_text(), None, "gpu")
    assert fields == ["name", "pci.bus", "index", "uuid"]
    assert [r.values["index"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[1].values["name"] == "GeForce GTX 1080 Ti" and rows[0].values["pci.bus"] == "0x01"


def test_header_units_are_dropped_and_na_is_missing() -> None:
    fields, rows = parse_smi_csv((SMI / "query_gpu_tesla_p100_header_nounits.csv").read_text(), None, "gpu")
    assert "fan.speed" in fields and "memory.used" in fields  # "[%]" / "[MiB]" stripped from names
    row = rows[0].values
    assert row["fan.speed"] is None and rows[0].missing["fan.speed"] == "N/A"
    assert (row["memory.free"], row["temperature.gpu"], row["power.draw"]) == (16280, 37, 28.16)


def test_all_fields_capture_parses_typed_values() -> None:
    fields, rows = parse_smi_csv((SMI / H200).read_text(), None, "gpu")
    assert len(fields) > 200
    row = rows[0]
    assert row.values["memory.total"] == 143771 and row.values["enforced.power.limit"] == 700.0
    assert row.values["clocks_event_reasons.active"] == "0x0000000000000001"
    assert row.values["display_mode"] is None
    assert row.missing["display_mode"] == "Requested functionality has been deprecated"


def test_wide_capture_projected_onto_asked_fields_any_spelling() -> None:
    fields, rows = parse_smi_csv((SMI / RTX2080S).read_text(), ["index", "clocks.sm", "clocks_throttle_reasons.active"],
                                 "gpu")
    assert fields == ["index", "clocks.sm", "clocks_throttle_reasons.active"]
    assert rows[0].values == {"index": 0, "clocks.sm": 765, "clocks_throttle_reasons.active": "0x0000000000000004"}
    with pytest.raises(BadInput, match="no column for mig.mode.pending"):
        parse_smi_csv((SMI / "query_gpu_tesla_p100_header_nounits.csv").read_text(), ["mig.mode.pending"], "gpu")


def test_noheader_needs_fields_in_capture_order() -> None:
    text = (SMI / "query_gpu_a6000_2gpu_noheader_nounits.csv").read_text()
    with pytest.raises(BadInput, match="no header line"):
        parse_smi_csv(text, None, "gpu")
    with pytest.raises(UnreadableInput, match="line 1 has 4 values but 2 fields"):
        parse_smi_csv(text, ["index", "uuid"], "gpu")
    _, rows = parse_smi_csv(text, ["index", "uuid", "name", "memory.free"], "gpu")
    assert [(r.values["index"], r.values["memory.free"]) for r in rows] == [(0, 2296), (1, 3497)]


def test_noheader_with_units_and_bare_na() -> None:
    fields = ("timestamp,name,pci.bus_id,driver_version,pstate,pcie.link.gen.max,pcie.link.gen.current,"
              "temperature.gpu,utilization.gpu,utilization.memory,memory.total,memory.free,memory.used").split(",")
    _, rows = parse_smi_csv((SMI / "query_gpu_a100_3gpu_noheader_units.csv").read_text(), fields, "gpu")
    assert rows[0].values["memory.total"] == 40960 and rows[0].values["utilization.gpu"] == 0
    assert rows[3].values["memory.used"] == 38803 and rows[3].values["utilization.gpu"] == 3
    assert rows[0].values["timestamp"] == "2024/06/01 11:27:05.177"
    single = ("power.limit,power.min_limit,power.max_limit,memory.total,vbios_version,driver_version,name,gpu_uuid,"
              "power.draw,temperature.gpu,temperature.memory,clocks.current.graphics,clocks.sm,clocks.mem,"
              "utilization.gpu,utilization.memory,fan.speed,pcie.link.width.current,pstate").split(",")
    _, rows = parse_smi_csv((SMI / "query_gpu_rtx2080_single_noheader_nounits.csv").read_text(), single, "gpu")
    assert rows[0].values["temperature.memory"] is None and rows[0].missing["temperature.memory"] == "N/A"
    assert rows[0].values["clocks.sm"] == 1965 and rows[0].values["power.draw"] == 176.98


def test_compute_apps_capture() -> None:
    fields, rows = parse_smi_csv((SMI / "query_compute_apps_h200_load_header_units.csv").read_text(), None,
                                 "compute_apps")
    assert fields[-1] == "used_gpu_memory"
    assert [(r.values["pid"], r.values["used_gpu_memory"]) for r in rows] == [(10291, 2566), (10293, 1542),
                                                                              (10309, 28234)]


def test_sampling_summary_and_findings_through_cli(tmp_path: Path) -> None:
    env = with_fake_smi(base_env(), f"capture:{H200},{RTX2080S}")
    done = run_cli(["nvidia-smi-query", "--json", "--count", "5", "--interval-s", "0.2"], env)
    assert done.returncode == 1, done.stderr  # utilisation 0% over 5 samples is a warning
    data = json.loads(done.stdout)
    util = [f for f in data["findings"] if "utilisation" in f["check"]]
    assert [f["check"] for f in util] == ["GPU 0 utilisation (median of 5)", "GPU 1 utilisation (median of 5)"]
    assert all(f["sop_branch"] == "gpu_utilization_low" for f in util)
    power = [s for s in data["summary"] if s["field"] == "power.draw"]
    assert [(s["gpu"], s["min"], s["median"], s["max"], s["samples"]) for s in power] == [
        ("0", 77.71, 77.71, 77.71, 5), ("1", 39.32, 39.32, 39.32, 5)]
    assert not [s for s in data["summary"] if s["field"] == "memory.total"]  # static: not summarised
    # The RTX 2080 SUPER's recorded power-cap reason (0x4) at 0% utilisation is not a finding:
    # a power cap only slows a GPU that is busy.
    assert [f["severity"] for f in data["findings"] if f["check"].endswith("clock throttle")] == ["ok"]


def test_gpu_selection_and_driver_error_text() -> None:
    env = with_fake_smi(base_env(), f"capture:{H200},{RTX2080S}")
    done = run_cli(["nvidia-smi-query", "--json", "--gpus", "1", "--fields", "index,name"], env)
    assert json.loads(done.stdout)["rows"] == [
        {"sample": 0, "values": {"index": 1, "name": "NVIDIA GeForce RTX 2080 SUPER"}, "missing": {}}]
    # A documented field this driver lacks: nvidia-smi's own message, and what to do.
    done = run_cli(["nvidia-smi-query", "--fields", "name,mig.mode.pending"],
                   with_fake_smi(base_env(), "capture:query_gpu_tesla_p100_header_nounits.csv"))
    assert done.returncode == 3
    assert 'Field "mig.mode.pending" is not a valid field to query.' in done.stderr
    assert "drop it from `fields`" in done.stderr


def test_nvml_fallback_when_nvidia_smi_is_missing(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.json", [h100(), h100(temperature=92, bus_id="00000000:2A:00.0")])
    env = with_fake_nvml(base_env(PATH="/usr/bin:/bin"), scenario)
    done = run_cli(["nvidia-smi-query", "--json", "--fields", "index,temperature.gpu,clocks.sm,fan.speed"], env)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    assert data["source"] == "nvml (nvidia-smi not on PATH)"
    assert [r["values"] for r in data["rows"]] == [
        {"index": 0, "temperature.gpu": 62, "clocks.sm": 1980, "fan.speed": None},
        {"index": 1, "temperature.gpu": 92, "clocks.sm": 1980, "fan.speed": None}]
    assert data["rows"][0]["missing"] == {"fan.speed": "not served from NVML"}
    assert [f["check"] for f in data["findings"] if f["severity"] == "crit"] == ["GPU 1 temperature"]


def test_no_nvidia_smi_and_no_nvml_is_a_clear_error() -> None:
    done = run_cli(["nvidia-smi-query"], base_env(PATH="/usr/bin:/bin"))
    assert done.returncode == 3
    assert "nvidia-smi not found on PATH and NVML unavailable: NVML Shared Library Not Found" in done.stderr
    assert "pass csv_path with a capture" in done.stderr
    assert done.stdout == ""


def test_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "core.csv"
    junk.write_bytes(b"\x7fELF\x02\x01\x00\x00" + bytes(range(256)) * 4)
    done = run_cli(["nvidia-smi-query", "--csv-path", "core.csv", "--root", str(tmp_path)], base_env())
    assert done.returncode == 3
    assert done.stderr.startswith("gpu-triage nvidia-smi-query: not nvidia-smi CSV output")
    assert "internal error" not in done.stderr


def test_a_dash_l_capture_is_a_series_and_its_periodic_dips_are_found(tmp_path: Path) -> None:
    """A capture in the layout `nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv -lms 500` writes
    (the header and value spelling of the recorded captures above), hand-made for two GPUs: GPU 0 at 97 % that drops
    to 3 % for 2 of every 8 samples (a stall every 4 s), GPU 1 steady; and a step log of the same job, whose mean
    step is 0.5 s. The public -l captures found have no licence, so none is committed (benchmarks/accuracy_host.py
    --smi-extra scores such a folder)."""
    lines = ["timestamp, index, utilization.gpu [%]"]
    for sample in range(48):
        seconds = sample * 0.5
        stamp = f"2026/11/30 10:{int(seconds) // 60:02d}:{seconds % 60:06.3f}"
        lines += [f"{stamp}, 0, {3 if sample % 8 in (6, 7) else 97} %", f"{stamp}, 1, {95 + sample % 3} %"]
    (tmp_path / "util.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "train.log").write_text("".join(f"step {n} time {1000 if n % 8 == 0 else 428.6:.1f} ms\n"
                                                for n in range(1, 65)))
    done = run_cli(["nvidia-smi-query", "--csv-path", "util.csv", "--step-logs", "train.log", "--json",
                    "--root", str(tmp_path)], base_env())
    data = json.loads(done.stdout)
    assert data["samples"] == 48  # one row per GPU per sample
    periodic = data["periodic"]
    assert periodic["series"] == "GPU 0 utilisation" and abs(periodic["period_s"] - 4.0) <= 0.4, periodic
    assert periodic["dip_depth_pct"] == 94 and periodic["period_steps"] == 8, periodic
    assert any(f["check"] == "GPU 0 utilisation periodic dips" and "about every 8 steps" in f["value"]
               for f in data["findings"]), data["findings"]
    assert done.returncode == 1  # a warning


def _query(args: list[str], env: dict[str, str]) -> tuple[int, dict]:
    done = run_cli(["nvidia-smi-query", "--json", *args], env)
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_capture_read_whole_is_ok_and_says_so() -> None:
    code, data = _query(["--csv-path", H200, "--fields", "index,temperature.gpu", "--root", str(SMI)], base_env())
    assert (code, data["severity"], data["decides"]) == (0, "ok", None)
    assert data["coverage"] == [{"input": H200, "status": "read", "formats_known": None,  # relative to the root
                                 "detail": "1 row(s), 1 sample(s) of 2 field(s)"}]
    # A field this GPU leaves N/A is named: the capture was read in part.
    _, p100 = _query(["--csv-path", "query_gpu_tesla_p100_header_nounits.csv", "--root", str(SMI)], base_env())
    assert p100["coverage"][0]["status"] == "partial" and "fan.speed" in p100["coverage"][0]["detail"]


def test_fields_with_no_value_anywhere_cannot_tell() -> None:
    # The P100 reports fan.speed as [N/A]: asked for alone, nothing was measured.
    code, data = _query(["--csv-path", "query_gpu_tesla_p100_header_nounits.csv", "--fields", "fan.speed",
                         "--root", str(SMI)], base_env())
    assert (code, data["severity"]) == (4, "unknown")
    assert data["coverage"][0]["status"] == "not_understood"
    assert data["coverage"][0]["detail"] == "no field has a value in any row (N/A)"
    assert data["decides"].startswith("The same query on fields that have values here")


def test_one_reading_of_utilisation_is_not_a_verdict() -> None:
    env = with_fake_smi(base_env(), f"capture:{H200}")
    # Utilisation alone, read once: an idle moment or a sustained low utilisation look the same.
    code, data = _query(["--fields", "index,utilization.gpu"], env)
    assert (code, data["severity"], data["findings"]) == (4, "unknown", [])
    assert data["coverage"][0] == {"input": "nvidia-smi", "status": "read", "formats_known": None,
                                   "detail": "1 row(s), 1 sample(s) of 2 field(s)"}
    assert "1 reading(s) of utilization.gpu show a moment" in data["conclusion"][0]
    assert data["decides"].startswith("nvidia_smi_query count=10")
    # With the triage set, the other checks still judge the GPU; the conclusion says utilisation was not judged.
    code, data = _query([], env)
    assert data["severity"] != "unknown" and data["findings"]
    assert "But 1 reading(s) of utilization.gpu show a moment" in data["conclusion"][1]
    # Five samples are a series: a verdict (0 % on the idle H200 is low).
    code, data = _query(["--fields", "index,utilization.gpu", "--count", "5", "--interval-s", "0.2"], env)
    assert (code, data["severity"]) == (1, "warn")


def test_a_capture_with_no_rows_is_refused(tmp_path: Path) -> None:
    (tmp_path / "header_only.csv").write_text("index, utilization.gpu [%]\n")
    done = run_cli(["nvidia-smi-query", "--csv-path", "header_only.csv", "--root", str(tmp_path)], base_env())
    assert done.returncode == 3 and "holds no rows of nvidia-smi output (only its header line)" in done.stderr


def test_a_long_capture_returns_its_last_rows_and_summarises_them_all(tmp_path: Path) -> None:
    # The recorded P100 capture's row repeated 20k times (a day of `-l` output): the result carries the last
    # SMI_MAX_ROWS_RETURNED rows and says so; the per-GPU summary counts every row.
    header, row = (DATA / "nvidia_smi" / "query_gpu_tesla_p100_header_nounits.csv").read_text().splitlines()[:2]
    (tmp_path / "day.csv").write_text("\n".join([header] + [row] * 20_000) + "\n")
    result = anyio.run(nvidia_smi_query, NvidiaSmiQueryInput(csv_path="day.csv"), ToolContext(roots=(tmp_path,)))
    assert len(result.rows) == SMI_MAX_ROWS_RETURNED
    assert any(f"the last {SMI_MAX_ROWS_RETURNED} of 20000 are returned" in note for note in result.notes)
    assert result.coverage[0].detail.startswith("20000 row(s)")
