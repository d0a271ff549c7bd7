"""sample_host on the host captures people paste (issue 32): top, free, PSI, numastat, pidstat, sar and sadf. Every
capture here is a real one from tests/data/host/round4/dev (its source, thread and author in dev/cases.jsonl); the
held-out half of that round is never read by a test. Where a format has no real capture in dev (sar -r/-B/-W/-d/-n
DEV, sadf -d, mpstat -P ALL with one hot core, pidstat -t), the test builds one in sysstat's own layout and says so.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tools.core.context import ToolContext
from tools.core.errors import UnreadableInput
from tools.host import SampleHostInput, SampleHostResult, sample_host
from tools.host.memory_formats import read_free, read_pressure
from tools.host.pidstat_format import read_pidstat
from tools.host.sar_format import read_sar
from tools.host.top_format import read_top

DEV = Path(__file__).resolve().parents[2] / "data" / "host" / "round4" / "dev"


def sample(root: Path, *files: str) -> SampleHostResult:
    return anyio.run(sample_host, SampleHostInput(from_files=list(files)), ToolContext(roots=(root.resolve(),)))


def test_top_one_core_pinned_is_a_single_threaded_main_loop() -> None:
    # dedicatedcode/reitti#693 (TomErnst1972): German-locale top, %Cpu44 at 100,0 us, %Cpu46 99,7 id, postgres 100 %.
    capture = read_top((DEV / "top__dedicatedcode-reitti-693.txt").read_text())
    assert capture.core_idle == {"44": [0.0], "46": [99.7]}
    assert capture.memory is not None and capture.memory.available_pct == 79.5  # "MiB Spch" read as memory
    assert capture.processes[0].command == "postgres" and capture.processes[0].cpu_pct == 100.0
    result = sample(DEV, "top__dedicatedcode-reitti-693.txt")
    assert result.verdict == "main_loop_cpu_bound" and result.severity.value == "warn"
    evidence = result.findings[0].evidence
    assert "CPU 44 100.0 % busy" in evidence and "postgres (pid 165929)" in evidence


def test_top_runnable_tasks_confined_to_one_core() -> None:
    # hpcaitech/FastFold#175 (jpetucci): load 20.82, 5 running, 97.8 % idle; hhblits at 59.6 % on core 0 (P column).
    result = sample(DEV, "top__hpcaitech-fastfold-175.txt")
    assert result.verdict == "main_loop_cpu_bound"
    assert "load average 20.82 with 5 tasks running" in result.findings[0].evidence
    assert "on core 0" in result.findings[0].evidence


def test_top_memory_exhaustion_leads_over_the_cpu_and_iowait_it_causes() -> None:
    # docker-mailserver#646 (ddyllen-z): 2432 KiB available of 2045872, swap full, 98.7 % sy, kswapd0 at 12.9 %.
    mail = sample(DEV, "top__docker-mailserver-docker-mailserver-646.txt")
    assert mail.verdict == "memory_pressure" and mail.severity.value == "crit"
    lead = mail.findings[0].evidence
    assert "0.1 % of memory available" in lead and "swap 100 % used" in lead and "kswapd0 at 12.9 %" in lead
    assert [f.kind for f in mail.findings] == ["memory_pressure", "cpu_bound"]
    # ubports/ubuntu-touch#1321 (erlend-g): 57068 KiB available of 938748, 75.2 wa, kswapd0 66.1 %: not a slow disk.
    pi = sample(DEV, "top__ubports-ubuntu-touch-1321.txt")
    assert pi.verdict == "memory_pressure" and "6.1 % of memory available" in pi.findings[0].evidence
    assert any(f.kind == "io_bound" and f.severity.value == "warn" for f in pi.findings)


def test_top_busy_cores_and_healthy_screens() -> None:
    # semihalf-berestovskyy-andriy/test4#11: 0.0 id, fpm at 197.7 %: the CPUs are saturated.
    assert sample(DEV, "top__semihalf-berestovskyy-andriy-test4-11.txt").verdict == "cpu_bound"
    # landley/toybox#333: toybox's 800%cpu ... 156%idle form is 8 cores, 19.5 % idle; its 366 % "thread" is no loop.
    toybox = read_top((DEV / "top__landley-toybox-333.txt").read_text())
    assert toybox.cores == 8 and toybox.idle_pct == [19.5] and toybox.processes[0].thread
    assert sample(DEV, "top__landley-toybox-333.txt").verdict == "none"
    # haproxy/haproxy#674: 14 per-CPU rows, 72-88 % idle each, no memory lines: CPU is ok, memory not claimed.
    haproxy = sample(DEV, "top__haproxy-haproxy-674.txt")
    assert haproxy.severity.value == "ok"
    assert haproxy.conclusion[1] == "No CPU bottleneck on the host (disk and memory not in what was read)."
    # OpenIPC/wiki#490: busybox "CPU: 18.1% usr ... 72.7% idle", load 12.38 with 1/79 running: not confined.
    assert sample(DEV, "top__openipc-wiki-490.txt").verdict == "none"


def test_free_layouts_and_units() -> None:
    # Wang-Kai/cherish-today#64: free -hwt (buffers and cache columns, a Total row): 4.9G of 7.6G available.
    wide = read_free((DEV / "free__wang-kai-cherish-today-64.txt").read_text()).memory
    assert wide is not None and wide.available_pct == round(100 * 4.9 / 7.6, 1) and not wide.available_estimated
    assert wide.swap_used_pct == round(100 * 114 / 511, 1)
    # GameServerManagers/LinuxGSM#1971: 172M free but 3.5G available, 1.8G swap used with no traffic: healthy.
    gsm = sample(DEV, "free__gameservermanagers-linuxgsm-1971.txt")
    assert gsm.severity.value == "ok" and gsm.memory_available_pct == round(100 * 3.5 / 15, 1)
    assert gsm.conclusion[1] == "No memory bottleneck on the host (disk and CPU not in what was read)."
    # The old -/+ buffers/cache row (procps 3.2): its free column is the available estimate.
    old = read_free("             total       used       free     shared    buffers     cached\n"
                    "Mem:       2054176    1998488      55688          0     161336    1092948\n"
                    "-/+ buffers/cache:     744204    1309972\n"
                    "Swap:      4194296      10240    4184056\n").memory
    assert old is not None and old.available_kb == 1309972 and old.available_estimated


def test_a_low_memory_snapshot_without_reclaim_is_unknown(tmp_path: Path) -> None:
    # The same layout as free__fabriziosalmi-proxmox-lxc-autoscale-18.txt with available cut to 3 %: no swap traffic,
    # no kswapd is in a free capture, so it cannot tell a full page cache from pressure.
    (tmp_path / "free.txt").write_text("          total     used     free   shared  buff/cache  available\n"
                                       "Mem:      31966    30870      147     1572         949        959\n"
                                       "Swap:      2047      137     1910\n")
    result = sample(tmp_path, "free.txt")
    assert result.severity.value == "unknown" and result.verdict == "none" and "vmstat 1 10" in (result.decides or "")
    assert "only 3 % of memory available" in result.conclusion[1]


def test_pressure_files() -> None:
    # tobixen/thrash-protect#28 (hakavlad): some 70.24 / full 57.59: every task stalled on memory most of the time.
    thrash = sample(DEV, "psi__tobixen-thrash-protect-28.txt")
    assert thrash.verdict == "memory_pressure" and "full avg10 57.59 %" in thrash.findings[0].evidence
    assert "does not name its PSI file" in thrash.findings[0].evidence
    # flatcar-archive/coreos-overlay#638: `cat /proc/pressure/*`, five lines: cpu (some), io and memory (some, full).
    flatcar = read_pressure((DEV / "psi__flatcar-archive-coreos-overlay-638.txt").read_text())
    assert [(p.resource, p.some[0], p.full) for p in flatcar.pressure] == [
        ("cpu", 0.13, None), ("io", 0.0, (0.0, 0.91, 0.56)), ("memory", 0.0, (0.0, 0.0, 0.0))]
    assert sample(DEV, "psi__flatcar-archive-coreos-overlay-638.txt").severity.value == "ok"
    # Named by a prefix (grep . /proc/pressure/*): an io stall is io_bound, not memory.
    named = read_pressure("/proc/pressure/io:some avg10=55.00 avg60=40.00 avg300=20.00 total=1\n"
                          "/proc/pressure/io:full avg10=30.00 avg60=25.00 avg300=10.00 total=1\n")
    assert [(p.resource, p.named) for p in named.pressure] == [("io", True)]


def test_cpu_pressure_alone_is_undecided(tmp_path: Path) -> None:
    # CPU pressure alone is contention or a cgroup's quota: unknown, with what decides.
    (tmp_path / "pressure_cpu.txt").write_text("some avg10=75.00 avg60=70.00 avg300=60.00 total=123\n")
    result = sample(tmp_path, "pressure_cpu.txt")
    assert result.severity.value == "unknown" and "cpu.stat" in (result.decides or "")


def test_since_boot_summaries_are_not_a_sample() -> None:
    # RedHatInsights/insights-core#2144: plain mpstat; Wang-Kai/cherish-today#60: three pidstat reports, no
    # interval; kellyjonbrazil/jc pidstat-ht fixture; apache/iggy#3507: iostat's first report under its banner.
    for name in ("mpstat__redhatinsights-insights-core-2144.txt", "pidstat__wang-kai-cherish-today-60.txt",
                 "pidstat__kellyjonbrazil-jc-pidstat-ht.txt", "iostat__apache-iggy-3507.txt"):
        result = sample(DEV, name)
        assert result.severity.value == "unknown" and result.coverage[0].status.value == "partial", name
        assert "since boot" in result.coverage[0].detail and result.decides, name
    pidstat = read_pidstat((DEV / "pidstat__wang-kai-cherish-today-60.txt").read_text())
    assert pidstat.since_boot and pidstat.cores == 4
    row = pidstat.processes[0]
    assert (row.pid, row.command, row.cpu_pct, row.io_kbs, row.major_faults_s) == (979, "exchange", 0.01, 0.9, 0.0)


def test_pidstat_with_an_interval() -> None:
    # tests/data/host/pidstat__netflix-60s.txt (Brendan Gregg's 60 s checklist): two java at ~1590 % on 32 CPUs.
    result = sample(DEV.parents[1], "pidstat__netflix-60s.txt")
    assert result.verdict == "cpu_bound" and "of the 32 CPUs" in result.findings[0].evidence
    # pidstat -t in sysstat's layout: one thread at 99 % of a core on an 8-CPU host is a single-threaded loop.
    text = ("Linux 5.15.0 (node1) \t01/02/2025 \t_x86_64_\t(8 CPU)\n\n"
            "10:00:00 AM   UID      TGID       TID    %usr %system  %guest   %wait    %CPU   CPU  Command\n"
            "10:00:01 AM  1000      4242         -   99.00    1.00    0.00    0.00  100.00     3  python\n"
            "10:00:01 AM  1000         -      4242   98.00    1.00    0.00    0.00   99.00     3  |__python\n"
            "10:00:01 AM  1000         -      4250    1.00    0.00    0.00    0.00    1.00     5  |__pt_data_worker\n")
    capture = read_pidstat(text)
    assert not capture.since_boot and [(p.pid, p.thread) for p in capture.processes] == [(4242, False), (4242, True),
                                                                                         (4250, True)]


def test_sar_sections_by_their_columns(tmp_path: Path) -> None:
    # darold/sysusage#6 (jperseo): sar -u ALL at 10-minute intervals, 90-92 % idle.
    assert sample(DEV, "sar__darold-sysusage-6.txt").severity.value == "ok"
    # sysstat 12's -r, -W, -B and -d layouts (no real capture of them in dev): swapping with 2 % available.
    text = "\n".join([
        "Linux 5.15.0 (node1) \t01/02/2025 \t_x86_64_\t(8 CPU)", "",
        "10:00:01 AM kbmemfree   kbavail kbmemused  %memused kbbuffers  kbcached  kbcommit   %commit",
        "10:00:02 AM    100000    300000  15000000     95.00     10000    200000  30000000    150.00",
        "10:00:03 AM     90000    280000  15010000     95.10     10000    190000  30000000    150.00",
        "Average:       95000    290000  15005000     95.05     10000    195000  30000000    150.00", "",
        "10:00:01 AM  pswpin/s pswpout/s", "10:00:02 AM    812.00   1530.00", "10:00:03 AM    640.00   1201.00", "",
        "10:00:01 AM  pgpgin/s pgpgout/s   fault/s  majflt/s  pgfree/s pgscank/s pgscand/s pgsteal/s    %vmeff",
        "10:00:02 AM   3200.00   6100.00   9000.00    410.00  12000.00  50000.00   8000.00  20000.00     34.00", "",
        "10:00:01 AM       DEV       tps     rkB/s     wkB/s   areq-sz    aqu-sz     await     svctm     %util",
        "10:00:02 AM       sda    210.00   3200.00   6100.00     44.00      9.50     45.00      4.70     99.80", ""])
    capture = read_sar(text)
    assert capture.swap_in == [812.0, 640.0] and capture.major_faults_s == [410.0]
    assert capture.memory is not None and capture.memory.available_pct == round(100 * 280000 / (15010000 / 0.951), 1)
    assert capture.disks[0].name == "sda" and capture.disks[0].await_ms == 45.0 and capture.disks[0].iops == 210.0
    (tmp_path / "sar.txt").write_text(text)
    result = sample(tmp_path, "sar.txt")
    assert result.verdict == "memory_pressure" and "swap in/out up to 1530/s in sar" in result.findings[0].evidence


def test_sadf_and_numastat() -> None:
    # risuorg/risu#387: `sadf -H` lists a file's activities and no value: not understood, never ok.
    header = sample(DEV, "sadf__risuorg-risu-387.txt")
    assert header.severity.value == "unknown" and header.coverage[0].status.value == "not_understood"
    assert "sadf -d" in header.coverage[0].detail
    # prometheus/node_exporter#248: node0's sysfs numastat, numa_miss 0: NUMA placement is ok.
    node = sample(DEV, "numastat__prometheus-node-exporter-248.txt")
    assert node.severity.value == "ok" and "NUMA placement" in node.conclusion[1]
    # WyvernTKC/cpuminer-gr-avx2#22: numastat -m with three memory-less nodes: said in a note.
    nodes = sample(DEV, "numastat__wyverntkc-cpuminer-gr-avx2-22.txt")
    assert any("node0, node2, node3 hold no memory" in n for n in nodes.notes)


def test_sadf_semicolon_rows(tmp_path: Path) -> None:
    # sadf -d's own layout (sysstat 12): CPU -1 is the `all` row.
    (tmp_path / "sadf.txt").write_text(
        "# hostname;interval;timestamp;CPU;%user;%nice;%system;%iowait;%steal;%idle\n"
        "node1;600;2025-01-02 10:10:01 UTC;-1;97.10;0.00;2.50;0.00;0.00;0.40\n"
        "node1;600;2025-01-02 10:20:01 UTC;-1;96.80;0.00;2.70;0.00;0.00;0.50\n")
    result = sample(tmp_path, "sadf.txt")
    assert result.verdict == "cpu_bound" and result.cpu.idle_pct in (0.4, 0.5)


def test_mpstat_one_hot_core(tmp_path: Path) -> None:
    # mpstat -P ALL in sysstat's layout (as tests/data/host/mpstat__netflix-60s-saturated.txt): CPU 2 at 0 % idle.
    rows = ["Linux 5.15.0 (node1) \t01/02/2025 \t_x86_64_\t(4 CPU)", "",
            "10:00:00 AM  CPU    %usr   %nice    %sys %iowait    %irq   %soft  %steal  %guest  %gnice   %idle"]
    for second in ("01", "02"):
        rows += [f"10:00:{second} AM  all  25.10  0.00  0.40  0.00  0.00  0.00  0.00  0.00  0.00  74.50",
                 f"10:00:{second} AM  0  1.00  0.00  0.00  0.00  0.00  0.00  0.00  0.00  0.00  99.00",
                 f"10:00:{second} AM  1  0.00  0.00  1.00  0.00  0.00  0.00  0.00  0.00  0.00  99.00",
                 f"10:00:{second} AM  2  99.00  0.00  1.00  0.00  0.00  0.00  0.00  0.00  0.00  0.00",
                 f"10:00:{second} AM  3  0.50  0.00  0.50  0.00  0.00  0.00  0.00  0.00  0.00  99.00"]
    (tmp_path / "mpstat.txt").write_text("\n".join(rows) + "\n")
    result = sample(tmp_path, "mpstat.txt")
    assert result.verdict == "main_loop_cpu_bound" and "CPU 2 100.0 % busy" in result.findings[0].evidence


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    result = sample(tmp_path, "empty.txt")
    assert result.severity.value == "unknown" and result.coverage[0].status.value == "not_understood"
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(UnreadableInput):
        sample(tmp_path, "bin.txt")


def test_one_core_pinned_while_the_rest_have_headroom_is_a_main_loop() -> None:
    # solana-labs/solana (tests/data/host/round13/dev): mpstat -P ALL's Average block, CPU 0 at 99.67 % usr while
    # the others run at about 31 % and are 63 % idle: one hot thread limits the validator.
    round13 = Path(__file__).resolve().parents[2] / "data" / "host" / "round13" / "dev"
    result = sample(round13, "mpstat__solana-labs-solana-1.txt")
    assert result.verdict == "main_loop_cpu_bound" and "CPU 0 100.0 % busy" in result.findings[0].evidence


def test_vmstat_with_a_timestamp_before_every_line_is_read(tmp_path: Path) -> None:
    # `vmstat 1 | ts '%F %T'`: the stamp `ts` puts before each line, the header included; the first report (since
    # boot) is still dropped, and the swap traffic of the others is read.
    lines = ["procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu-----",
             " r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st",
             " 1  0      0 812340  10240 903200    0    0    12    30  200  400  5  1 94  0  0",
             " 2  6 1048576  20340   1024  30200 4200 5100  9000  6000 1200 2400  5 20 10 65  0",
             " 1  7 1048576  19340   1024  29200 3900 4800  8800  5900 1100 2300  4 22  9 65  0"]
    (tmp_path / "vmstat.txt").write_text("".join(f"2024-06-01 10:00:0{i} {line}\n" for i, line in enumerate(lines)))
    result = sample(tmp_path, "vmstat.txt")
    assert result.coverage[0].status.value == "read" and result.coverage[0].detail == "vmstat: 2 report(s)"
    assert result.verdict == "memory_pressure"
    assert result.findings[0].evidence.startswith("the host swaps (swap in/out up to 5100/s in vmstat)")
