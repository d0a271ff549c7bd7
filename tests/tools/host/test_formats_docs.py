"""Format coverage of sample_host's capture readers on real documented outputs (tests/data/host/formats_docs: man-page
and documentation examples, and captures pasted in public notes and translated articles; each file's source, licence
and what the readers made of it before this round's fixes are in its cases.jsonl line). For every capture: whether it
is read (or, for one whose sections hold no host figure, refused as not understood), and the figures the text shows:
per-disk %util / await / queue, CPU idle / iowait / user, per-CPU idle, memory available and swap, run queue, the
processes' %CPU, PSI and NUMA counters. The numbers below are copied from the captures' own text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.host import SampleHostInput, SampleHostResult, sample_host
from tools.host.host_formats import HostCapture
from tools.host.sample import _read_capture

DATA = Path(__file__).resolve().parents[2] / "data" / "host" / "formats_docs"

# file -> (coverage status, kind read, expected figures). Figures: idle / iowait / user (the series of CPU shares, one
# per interval kept), disks {name: (util, await, queue)} of the last sample of that name, cores {cpu: idle series},
# avail / total (KiB, or the capture's unit for free's plain numbers), swap (used, total), runq (series),
# procs {pid: %CPU} (pids of the last report), reports, since_boot, psi [(resource, some avg10, full avg10 or None)],
# numa [(node, hit, miss)], ifaces {name: %ifutil}.
CASES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "free__LCTT-free-standard-g.txt": ("read", "free", {"total": 31, "avail": 29, "swap": (0, 3)}),
    "free__LCTT-free-standard-h-G-suffix.txt": ("read", "free", {"total": 2.0 * 1024**2, "avail": 161 * 1024,
                                                                  "swap": (1.8 * 1024**2, 2.0 * 1024**2)}),
    "free__LCTT-free-standard-l-low-high.txt": ("read", "free", {"total": 32849392, "avail": 31733288}),
    "free__LCTT-free-standard-old-buffers-cache.txt": ("read", "free", {"total": 32869744, "avail": 31209216,
                                                                         "swap": (0, 4095992)}),
    "free__LCTT-free-standard-s-2.txt": ("read", "free", {"total": 32849392, "avail": 31729644, "reports": 3}),
    "free__LCTT-free-standard-t-total.txt": ("read", "free", {"total": 32869744, "avail": 31209216}),
    "free__LCTT-free-standard-wh.txt": ("read", "free", {"total": 2.0 * 1024**2, "avail": 163 * 1024}),
    # free -o: no -/+ row, so free + buffers + cached = 109108 + 120368 + 655548.
    "free__LCTT-free10-o.txt": ("read", "free", {"total": 1021628, "avail": 885024}),
    "free__LCTT-free10-tab-header.txt": ("read", "free", {"total": 1021628, "avail": 884996, "swap": (0, 4194296)}),
    "free__LCTT-monitor-watch-free-m.txt": ("read", "free", {"total": 5959, "avail": 4878}),
    "free__LCTT-stress-free-loop-vm.txt": ("read", "free", {"total": 6087064, "avail": 4811200, "reports": 3}),
    "free__azure-docs-aks-free-m.txt": ("read", "free", {"total": 64403, "avail": 61223}),
    # BusyBox: buffers only, no cached column: free + buffers = 8904 + 93124.
    "free__busybox-free-c-example-usage.txt": ("read", "free", {"total": 257628, "avail": 102028,
                                                                 "swap": (8404, 128516)}),
    "free__jdxj-free-default.txt": ("read", "free", {"total": 8169348, "avail": 7611064}),
    "iostat__IceHe-lib-iostat-1-3-plain.txt": ("read", "iostat", {"idle": [98.79, 98.62], "iowait": [0.0, 0.0],
                                                                  "reports": 2}),
    "iostat__IceHe-lib-iostat-c.txt": ("partial", "iostat", {"idle": [98.76], "iowait": [0.05], "since_boot": True}),
    "iostat__IceHe-lib-iostat-d.txt": ("partial", "iostat", {"since_boot": True}),
    "iostat__IceHe-lib-iostat-x-old-layout.txt": ("partial", "iostat", {"disks": {"sda": (1.63, 9.21, 0.08)},
                                                                        "since_boot": True}),
    "iostat__LCTT-vmstat-iostat-iostat-N-lvm.txt": ("partial", "iostat", {"idle": [96.64], "since_boot": True}),
    "iostat__LCTT-vmstat-iostat-iostat-blk-old.txt": ("partial", "iostat", {"idle": [96.24], "iowait": [2.08]}),
    "iostat__LCTT-vmstat-iostat-iostat-c.txt": ("partial", "iostat", {"idle": [96.42], "iowait": [1.98],
                                                                      "since_boot": True}),
    "iostat__LCTT-vmstat-iostat-iostat-p-sda.txt": ("partial", "iostat", {"idle": [96.52]}),
    # -y: the one report is an interval, not the since-boot average.
    "iostat__azure-docs-aks-iostat-xy-1-1.txt": ("read", "iostat", {"idle": [91.76], "iowait": [1.9],
                                                                    "disks": {"sda": (0.8, 3.02, 0.01)},
                                                                    "reports": 1, "since_boot": False}),
    "iostat__jdxj-iostat-xd-sda-saturated.txt": ("read", "iostat", {"disks": {"sda": (99.2, 7270.44, 1102.18)}}),
    # mpstat -A with no interval: the CPU table only (the -I tables after it are not CPU shares), since boot.
    "mpstat__LCTT-sysstat20-mpstat-A-tz.txt": ("partial", "mpstat", {"idle": [54.76], "iowait": [2.01],
                                                                      "cores": {"0": [53.95], "1": [55.57]},
                                                                      "reports": 1, "since_boot": True}),
    "mpstat__LCTT-sysstat20-mpstat-P-ALL-2-5-tz.txt": ("read", "mpstat", {
        "idle": [44.36, 63.52, 61.01], "cores": {"0": [52.26, 66.84, 61.62], "1": [36.18, 60.71, 60.51]}}),
    "mpstat__azure-docs-aks-mpstat-P-ALL-24h.txt": ("read", "mpstat", {"idle": [96.11], "iowait": [2.14],
                                                                       "cores": {"0": [80.81], "7": [97.03]}}),
    "mpstat__jdxj-mpstat-P-ALL-5.txt": ("read", "mpstat", {"idle": [49.95], "cores": {"0": [100.0], "1": [0.0]}}),
    "pidstat__IceHe-lib-pidstat-2-5-ampm.txt": ("read", "pidstat", {"procs": {9: 0.5, 22086: 0.5}}),
    "pidstat__IceHe-lib-pidstat-no-interval.txt": ("partial", "pidstat", {"since_boot": True}),
    "pidstat__IceHe-lib-pidstat-r-p.txt": ("read", "pidstat", {"reports": 5}),
    "pidstat__LCTT-sysstat20-pidstat-d-2-tz.txt": ("read", "pidstat", {}),
    "pidstat__LCTT-sysstat20-pidstat-rh-epoch.txt": ("read", "pidstat", {"reports": 3}),
    "pidstat__LCTT-sysstat20-pidstat-t-p-tz.txt": ("read", "pidstat", {"procs": {4164: 23.0}}),
    "pidstat__jdxj-pidstat-d-p-1-3.txt": ("read", "pidstat", {"reports": 3}),
    "pidstat__jdxj-pidstat-u-5-1.txt": ("read", "pidstat", {"procs": {2962: 100.0}}),
    "pidstat__jdxj-pidstat-w-u-1.txt": ("read", "pidstat", {"procs": {10488: 100.0, 26326: 1.0}}),
    "pidstat__jdxj-pidstat-wt-1.txt": ("partial", "pidstat", {"since_boot": True}),
    "psi__linux-docs-psi-rst-cpu-format.txt": ("read", "psi", {"psi": [("cpu", 0.0, None)]}),
    "psi__linux-docs-psi-rst-memory-format.txt": ("read", "psi", {"psi": [("memory", 0.0, 0.0)]}),
    "sadf__LCTT-sysstat20-sadf-d-n-DEV.txt": ("read", "sadf", {"ifaces": {"eth0": 0.0}, "reports": 14}),
    "sar__5quinque-notes-sar-d-old-devM-N.txt": ("read", "sar", {"disks": {"dev120-64": (1.62, 9.33, 0.03)}}),
    "sar__5quinque-notes-sar-p-d-old.txt": ("read", "sar", {"disks": {"sdb1": (1.62, 9.33, 0.03),
                                                                     "sda": (0.1, 4.0, 0.0)}}),
    "sar__LCTT-sysstat20-sar-d-tz.txt": ("read", "sar", {"disks": {"dev8-0": (10.8, 15.43, 0.11)}, "reports": 3}),
    "sar__LCTT-sysstat20-sar-n-DEV-tz.txt": ("read", "sar", {"ifaces": {"eth0": None, "wlan0": None}}),
    "sar__LCTT-sysstat20-sar-q-tz.txt": ("read", "sar", {"runq": [1, 4, 2, 2, 0], "reports": 5}),
    # sar -r before kbavail: free + buffers + cached of the interval with the least (1465660 + 133052 + 1549644).
    "sar__LCTT-sysstat20-sar-r-tz.txt": ("read", "sar", {"avail": 3148356, "reports": 3}),
    "sar__LCTT-sysstat20-sar-u-tz.txt": ("read", "sar", {"idle": [60.45, 51.64, 39.49, 51.77, 45.5],
                                                         "user": [36.52, 43.32, 56.46, 44.44, 50.75]}),
    "sar__azure-docs-aks-sar-n-DEV-ifutil.txt": ("read", "sar", {"ifaces": {"eth0": 0.0, "enP1s1": 0.0}}),
    "sar__azure-docs-aks-sar-n-TCP-ETCP.txt": ("not_understood", None, {}),
    "sar__jdxj-sar-n-DEV-1.txt": ("read", "sar", {"ifaces": {"eth0": 0.01, "docker0": 0.0, "veth9f6bbcd": 0.05}}),
    "top__IceHe-lib-top-3.3.10-kib-gsuffix.txt": ("read", "top", {"idle": [97.8], "total": 16205448,
                                                                  "avail": 9169648, "swap": (133632, 8388604),
                                                                  "procs": {175308: 8.6, 163516: 4.0}}),
    "top__LCTT-cpu-usage-grep-percpu-lines.txt": ("read", "top", {"cores": {"1": [100.0], "4": [73.7]}}),
    # Rows with NI's value lost ("20     3106324 613584 327564 S  79.5"): read from the state letter on.
    "top__LCTT-high-cpu-top-b-percpu.txt": ("read", "top", {"cores": {"0": [83.9], "6": [68.6]},
                                                            "total": 16248556, "avail": 4596044,
                                                            "procs": {2179: 79.5, 1714: 20.2, 1211: 2.0,
                                                                      3286: 1.0}}),
    "top__LCTT-monitor-top-u-mib.txt": ("read", "top", {"idle": [99.8], "total": 5959.4 * 1024,
                                                        "avail": 4878.4 * 1024, "reports": 1}),
    "top__LCTT-top-batch-bc-kib.txt": ("read", "top", {"idle": [96.8], "total": 3880940, "avail": 2648472,
                                                       "swap": (533932, 1048572), "reports": 1}),
    "top__azure-docs-aks-top-summary-no-uptime-line.txt": ("read", "top", {"idle": [95.4], "iowait": [1.0],
                                                                            "avail": 62739060,
                                                                            "procs": {116004: 11.8, 4503: 5.9}}),
    "top__jdxj-top-kib-mem.txt": ("read", "top", {"idle": [99.3], "total": 8169348, "avail": 7497908}),
    # procps 3.3.9: "free. 19454152 cached Mem": free + buffers + cached = 5402912 + 518808 + 19454152.
    "vmstat__IceHe-lib-vmstat-S-M.txt": ("partial", "vmstat", {"since_boot": True}),
    "vmstat__IceHe-lib-vmstat-s-single.txt": ("partial", "vmstat -s", {"total": 16205448, "since_boot": True}),
    "vmstat__IceHe-lib-vmstat-t.txt": ("partial", "vmstat", {"idle": [99.0], "since_boot": True}),
    "vmstat__IceHe-lib-vmstat-w.txt": ("partial", "vmstat", {"idle": [99.0], "runq": [1.0], "since_boot": True}),
    "vmstat__LCTT-vmstat-iostat-vmstat-2-6.txt": ("read", "vmstat", {"idle": [100.0] * 5, "reports": 5}),
    "vmstat__LCTT-vmstat-iostat-vmstat-S-M-1-5.txt": ("read", "vmstat", {"idle": [100.0, 100.0, 100.0, 99.0]}),
    "vmstat__LCTT-vmstat-iostat-vmstat-t-procps3.2-tz.txt": ("read", "vmstat", {"idle": [94.0, 95.0, 95.0, 95.0],
                                                                                "runq": [1, 1, 0, 1]}),
    "vmstat__LCTT-vmstat-nifty-vmstat-2-10-no-st.txt": ("read", "vmstat", {
        "idle": [77.0, 90.0, 83.0, 84.0, 96.0, 71.0, 90.0, 90.0, 77.0], "reports": 9}),
    "vmstat__LCTT-vmstat-nifty-vmstat-t-1-5-tz.txt": ("read", "vmstat", {"idle": [100.0] * 4, "runq": [2, 0, 0, 0]}),
    "vmstat__azure-docs-aks-vmstat-since-boot.txt": ("partial", "vmstat", {"since_boot": True}),
    "vmstat__jdxj-vmstat-1-sysbench.txt": ("read", "vmstat", {"idle": [0.0], "runq": [8.0], "system": [84.0]}),
}


def read(name: str) -> tuple[HostCapture | None, str, str]:
    capture, coverage = _read_capture(name, (DATA / name).read_text(encoding="utf-8"))
    return capture, coverage.status.value, coverage.detail


def test_every_saved_capture_has_a_case_and_a_manifest_line() -> None:
    files = {p.name for p in DATA.glob("*.txt")}
    manifest = [json.loads(line) for line in (DATA / "cases.jsonl").read_text(encoding="utf-8").splitlines()]
    assert files == set(CASES) == {m["file"] for m in manifest}
    assert len(files) >= 40
    for entry in manifest:
        assert entry["url"].startswith("https://github.com/") and entry["licence"] and entry["variant"]


def _approx(value: float | None, expected: float | None) -> bool:
    if expected is None:
        return value is None
    return value is not None and value == pytest.approx(expected, rel=1e-3, abs=0.01)


@pytest.mark.parametrize("name", sorted(CASES))
def test_capture_is_read_with_the_figures_its_text_shows(name: str) -> None:
    status, kind, facts = CASES[name]
    capture, got_status, detail = read(name)
    assert got_status == status, detail
    if status == "not_understood":
        assert capture is None and detail
        return
    assert capture is not None and capture.kind == kind
    for key, series in (("idle", capture.idle_pct), ("iowait", capture.iowait_pct), ("user", capture.user_pct),
                        ("system", capture.system_pct), ("runq", capture.run_queue)):
        if key in facts:
            assert series == pytest.approx(facts[key]), key
    disks = {d.name: d for d in capture.disks}
    for disk, (util, waited, queue) in facts.get("disks", {}).items():
        assert _approx(disks[disk].util_pct, util) and _approx(disks[disk].await_ms, waited), disk
        assert _approx(disks[disk].queue_depth, queue), disk
    for cpu, idle in facts.get("cores", {}).items():
        assert capture.core_idle[cpu] == pytest.approx(idle), cpu
    if "avail" in facts or "total" in facts or "swap" in facts:
        memory = capture.memory
        assert memory is not None
        if "avail" in facts:
            assert _approx(memory.available_kb, facts["avail"])
        if "total" in facts:
            assert _approx(memory.total_kb, facts["total"])
        if "swap" in facts:
            assert _approx(memory.swap_used_kb, facts["swap"][0])
            assert _approx(memory.swap_total_kb, facts["swap"][1])
    if "procs" in facts:
        cpu_of = {p.pid: p.cpu_pct for p in capture.processes if not p.thread}
        for pid, cpu in facts["procs"].items():
            assert _approx(cpu_of.get(pid), cpu), pid
    if "reports" in facts:
        assert capture.reports == facts["reports"]
    if "since_boot" in facts:
        assert capture.since_boot is facts["since_boot"]
    if "psi" in facts:
        assert [(p.resource, p.some[0], p.full[0] if p.full else None) for p in capture.pressure] == facts["psi"]
    if "numa" in facts:
        assert [(n.node, n.hit, n.miss) for n in capture.numa] == facts["numa"]
    for iface, util in facts.get("ifaces", {}).items():
        assert _approx(capture.interfaces[iface], util), iface


def test_mpstat_interrupt_tables_are_not_cpu_shares() -> None:
    # mpstat -A: after the CPU table come -I SUM, -I CPU and -I SCPU (HI/s ... RCU/s: ten columns, as many as the
    # CPU table's). CPU 0's RCU/s (36.99) must not become a second reading of its idle share.
    capture, _, _ = read("mpstat__LCTT-sysstat20-mpstat-A-tz.txt")
    assert capture is not None and capture.core_idle == {"0": [53.95], "1": [55.57]}


def test_time_zone_after_the_stamp_does_not_hide_sar_sections() -> None:
    # "02:00:44  IST   runq-sz ..." (a locale whose %X ends with the zone): the zone is part of the stamp.
    capture, status, _ = read("sar__LCTT-sysstat20-sar-q-tz.txt")
    assert status == "read" and capture is not None and capture.load_1m == 1.64


def test_pidstat_r_columns_stay_pidstat_not_sar_paging() -> None:
    # pidstat -r shares sar -B's majflt/s; its header (PID ... Command) keeps it pidstat's.
    capture, _, _ = read("pidstat__IceHe-lib-pidstat-r-p.txt")
    assert capture is not None and capture.kind == "pidstat" and capture.processes[0].pid == 15920


def sample(*files: str) -> SampleHostResult:
    return anyio.run(sample_host, SampleHostInput(from_files=list(files)), ToolContext(roots=(DATA.resolve(),)))


def test_sar_sections_without_host_figures_say_so_and_give_no_verdict() -> None:
    result = sample("sar__azure-docs-aks-sar-n-TCP-ETCP.txt")
    assert result.severity.value == "unknown" and result.coverage[0].status.value == "not_understood"
    assert "sar__azure-docs-aks-sar-n-TCP-ETCP.txt" in result.conclusion[0]


def test_iostat_y_single_report_is_judged_as_an_interval() -> None:
    # The since-boot report would be unknown; with -y it is a 1 s interval on an idle host: none.
    result = sample("iostat__azure-docs-aks-iostat-xy-1-1.txt")
    assert result.verdict == "none" and result.severity.value != "unknown"
    assert {d.name for d in result.disks} >= {"sda", "sdb"}


def test_saturated_disk_in_the_middle_layout_is_io_bound() -> None:
    # sysstat 11.6-12.0 layout: sda w_await 7270.44 ms with aqu-sz 1102.18 at 99.2 % util.
    result = sample("iostat__jdxj-iostat-xd-sda-saturated.txt")
    assert result.verdict == "io_bound" and "sda" in result.findings[0].evidence
