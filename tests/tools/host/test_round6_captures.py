"""sample_host on the formats and verdicts round 6's development captures showed it missing (issue 32): a stalled
device whose await reads 0 (Little's law), iowait over a window, a top process table logged with no summary area,
free's Mem rows logged without the header, plain iostat, sar in a Japanese locale and vmstat -s. Every capture is a
real one from tests/data/host/round6/dev (its source URL in dev/cases.jsonl and in the test); the held-out half is
never read by a test. Where a variant has no real capture in dev (iostat -h, sadf -j, top and free in other locales,
vmstat -t), the test builds one in the tool's own layout (sysstat's iostat.c / json_stats.c, procps-ng's po files
and vmstat.c) and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from tools.core.context import ToolContext
from tools.host import SampleHostInput, SampleHostResult, sample_host
from tools.host.host_formats import clock_span, read_iostat, read_mpstat, read_vmstat, read_vmstat_counters
from tools.host.memory_formats import is_free, read_free
from tools.host.sar_format import is_sar, read_sar
from tools.host.top_format import read_top

DEV = Path(__file__).resolve().parents[2] / "data" / "host" / "round6" / "dev"
DATA = Path(__file__).resolve().parent / "data"


def sample(root: Path, *files: str) -> SampleHostResult:
    return anyio.run(sample_host, SampleHostInput(from_files=list(files)), ToolContext(roots=(root.resolve(),)))


def test_a_stalled_device_is_io_bound_by_littles_law() -> None:
    # https://github.com/Goose97/postgres_long_commit/blob/e6ea3d0bcca6878fc2359de920e0932c67049315/iostat.log:
    # vdb at 100 % util with 12-13 requests in flight completes 1-10 IO/s; its await column reads 0.00.
    capture = read_iostat((DEV / "iostat__Goose97-postgres_long_commit-iostat-log.txt").read_text())
    vdb = [d for d in capture.disks if d.name == "vdb"]
    assert [d.await_ms for d in vdb] == [0.0, 4.0, 0.0] and [d.queue_time_ms for d in vdb] == [2400.0, 1236.0, 13000.0]
    result = sample(DEV, "iostat__Goose97-postgres_long_commit-iostat-log.txt")
    assert result.verdict == "io_bound" and result.severity.value == "crit"
    evidence = result.findings[0].evidence
    assert evidence.startswith("vdb: up to 13 requests in flight at 100.0 % util") and "13000 ms" in evidence
    assert "Little's law" in evidence and "stalled" in evidence
    assert next(d for d in result.disks if d.name == "vdb").queue_time_ms == 13000.0


def test_iowait_is_the_windows_share_with_tasks_blocked() -> None:
    # https://github.com/mysqlbin/dba_note/blob/fa5bcc8e9355ef77b41939b3154a9edc8482c736/vmstat.txt: a MySQL update,
    # wa 0-88 % over 35 one-second rows (median 12, mean 24.2), b = 1 in ten of them.
    result = sample(DEV, "vmstat__mysqlbin-dba_note-vmstat-txt.txt")
    assert result.cpu.iowait_pct == 24.2 and result.cpu.blocked == 1.0
    assert result.verdict == "io_bound" and result.findings[0].evidence == "CPU iowait 24.2 % with 1 task(s) blocked"


def test_an_idle_host_with_some_iowait_stays_healthy() -> None:
    # https://github.com/ethereum/go-ethereum/issues/21089 (vmstat 1, geth import): no iowait to speak of.
    result = sample(DEV, "vmstat__ethereum-go-ethereum-21089.txt")
    assert result.verdict == "none" and result.severity.value == "ok" and (result.cpu.iowait_pct or 0) < 20


def test_a_logged_top_process_table_shows_memory_running_out() -> None:
    # https://github.com/easbar/oom_error/blob/801df2cb99c0a3c41638af743af63e22cd50f17b/top.log: a script's own
    # lower-case header after '#', a date before each row, java's %MEM 92.5 -> 97.8 over six minutes, no summary.
    text = (DEV / "top__easbar-oom_error-top-log.txt").read_text()
    capture = read_top(text)
    assert [(p.pid, p.command, p.mem_pct) for p in capture.processes] == [(16949, "java", 97.8)]
    assert capture.memory is None and len(capture.memory_series) == 39
    assert capture.memory_series[0].available_pct == 7.5 and capture.memory_series[-1].available_pct == 2.2
    result = sample(DEV, "top__easbar-oom_error-top-log.txt")
    assert result.verdict == "memory_pressure" and result.severity.value == "crit"
    evidence = result.findings[0].evidence
    assert evidence.startswith("at most 2.2 % of memory available (top: java (pid 16949) holds 97.8 % of memory")
    assert "down from 7.5 %" in evidence
    assert result.memory_available_pct is None  # a bound is no reading of the host's memory


def test_a_process_table_alone_that_does_not_run_out_clears_nothing(tmp_path: Path) -> None:
    # The same real log's first seven rows: java steady at 92.5 %, at most 7.5 % left but not falling: undecided.
    lines = (DEV / "top__easbar-oom_error-top-log.txt").read_text().splitlines()[:8]
    (tmp_path / "top.log").write_text("\n".join(lines) + "\n")
    result = sample(tmp_path, "top.log")
    assert result.verdict == "none" and result.severity.value == "unknown" and result.decides
    assert "at most 7.5 % of memory available" in result.conclusion[1] and "over 7 readings, not falling" in \
        result.conclusion[1]
    # https://github.com/gkristian/csd_project/blob/09db2e360ed89d1552905201fea3af4a09043918/HUM/top.log, its
    # process table alone (the summary area left out): the rows are neither the host's CPU nor its memory, so
    # unknown, never a clean bill; the whole screen is ok.
    table = (DEV / "top__gkristian-csd_project-hum-top-log.txt").read_text().split("\n\n", 1)[1]
    (tmp_path / "table.txt").write_text(table)
    result = sample(tmp_path, "table.txt")
    assert result.verdict == "none" and result.severity.value == "unknown" and "process rows alone" in \
        result.conclusion[1]
    assert sample(DEV, "top__gkristian-csd_project-hum-top-log.txt").severity.value == "ok"


def test_free_rows_logged_without_their_header() -> None:
    # https://github.com/easbar/oom_error/blob/801df2cb99c0a3c41638af743af63e22cd50f17b/mem.log: `free -m`'s Mem row
    # with a date, every second, until the OOM kill: available 3791 -> 789 MiB of 257844 as the cache is evicted.
    text = (DEV / "free__easbar-oom_error-mem-log.txt").read_text()
    assert is_free(text)
    capture = read_free(text)
    assert "total used free shared buff/cache available" in capture.what and len(capture.memory_series) == 40
    lowest = min(capture.memory_series, key=lambda m: m.available_pct or 100)
    assert lowest.available_kb == 789 and lowest.cache_kb == 342 and lowest.available_pct == 0.3
    result = sample(DEV, "free__easbar-oom_error-mem-log.txt")
    assert result.verdict == "memory_pressure"
    evidence = result.findings[0].evidence
    assert evidence.startswith("0.3 % of memory available (free) with buffers + page cache shrunk from 1.7 % of "
                               "memory to 0.1 % of memory")  # shares: free's plain numbers carry no unit
    assert "available memory down from 1.5 %" in evidence


def test_free_with_its_header_in_another_locale() -> None:
    # Built in procps-ng's own words: po/de.po translates the header ("gesamt benutzt frei gemns. Puffer/Cache
    # verfügbar") and the Mem label ("Speicher:"); free.c prints the columns in one fixed order.
    text = ("               gesamt       benutzt     frei      gemns.  Puffer/Cache verfügbar\n"
            "Speicher:       31Gi        13Gi       3,8Gi       207Mi        15Gi        18Gi\n"
            "Swap:          2,0Gi        32Ki       2,0Gi\n")
    capture = read_free(text)
    assert capture.memory is not None and capture.memory.available_pct == 58.1
    assert capture.memory.swap_total_kb == 2 * 1024**2
    # Rows whose numbers fit no layout of free's (here total below used + free + cache) are not read.
    assert read_free("Speicher:  10  20  30  0  40  50\n").reports == 0


def test_plain_iostat_is_iostat_and_since_boot() -> None:
    # https://github.com/Manouchehri/sandisk-plus-ssd/blob/9f313ce11d445124c33066a6cdef461592366e43/iostat.txt: plain
    # `iostat` (tps, kB_read/s): one report, the averages since boot; its `Device: tps` line is no sar header.
    text = (DEV / "iostat__Manouchehri-sandisk-plus-ssd-iostat-txt.txt").read_text()
    assert not is_sar(text)
    capture = read_iostat(text)
    assert capture.since_boot and capture.disks[0].iops == 9564.27 and capture.disks[0].util_pct is None
    assert round(capture.disks[0].read_mbs or 0, 1) == 94.7
    result = sample(DEV, "iostat__Manouchehri-sandisk-plus-ssd-iostat-txt.txt")
    assert result.severity.value == "unknown" and result.coverage[0].status.value == "partial"


def test_sar_in_a_japanese_locale() -> None:
    # https://github.com/HirokiTakano/AlmaLinux-work/blob/be9c2f660d7426520019e112b3b9736ff6e7866a/sar.txt:
    # `sar -P 0 1 1`, stamps 18時25分11秒, the average 平均値:, one CPU and no `all` row.
    text = (DEV / "sar__HirokiTakano-AlmaLinux-work-sar-txt.txt").read_text()
    capture = read_sar(text)
    assert capture.cores == 1 and capture.idle_pct == [96.94] and capture.iowait_pct == [1.02]
    result = sample(DEV, "sar__HirokiTakano-AlmaLinux-work-sar-txt.txt")
    assert result.verdict == "none" and result.severity.value == "ok" and result.coverage[0].status.value == "read"


def test_clock_stamps_of_sysstats_locales() -> None:
    # strftime's %X as sysstat prints it: en_US (12 h), fi_FI, zh_CN, ja_JP, ko_KR (three words).
    assert clock_span(["11:30:51", "AM", "all"]) == 2 and clock_span(["18.25.10", "all"]) == 1
    assert clock_span(["10时58分18秒", "all"]) == 1 and clock_span(["18時25分11秒", "0"]) == 1
    assert clock_span(["18시", "25분", "10초", "all"]) == 3 and clock_span(["0,56", "0,00"]) == 0


def test_vmstat_counters_since_boot_and_between_reports() -> None:
    # https://github.com/psiniemi/kinectOnRaspberryPi/blob/9597648e56d2914982907fd4ab51259056f5f79d/vmstat.log:
    # `date; vmstat -s` every second. One report is counters since boot; four give three intervals.
    one = sample(DEV, "vmstat__psiniemi-kinectOnRaspberryPi-vmstat-log.txt")
    assert one.severity.value == "unknown" and one.coverage[0].detail.startswith("vmstat -s: 1 report(s): only")
    capture = read_vmstat_counters((DATA / "vmstat_s__psiniemi-kinectOnRaspberryPi-4-reports.txt").read_text())
    assert not capture.since_boot and capture.reports == 3
    assert capture.idle_pct == [94.29, 88.57, 36.52] and capture.swap_in == [0.0, 0.0, 0.0]
    four = sample(DATA, "vmstat_s__psiniemi-kinectOnRaspberryPi-4-reports.txt")
    assert four.verdict == "none" and four.severity.value == "ok"


def test_iostat_human_parts_with_the_device_last() -> None:
    # Built in iostat.c's -h layout (sysstat 12.7): --pretty puts Device last, -x is split in parts per report,
    # sizes carry a unit letter (1.2M is in the kB/s column) and shares a %.
    report = ("avg-cpu:  %user   %nice %system %iowait  %steal   %idle\n"
              "           4.1%    0.0%    0.1%   30.0%    0.0%   65.7%\n\n"
              "     r/s     rkB/s   rrqm/s  %rrqm r_await rareq-sz Device\n"
              "  120.00      1.2M     0.00   0.0%   45.10    10.0k sda\n\n"
              "     w/s     wkB/s   wrqm/s  %wrqm w_await wareq-sz Device\n"
              "    3.00     12.0k     0.00   0.0%    2.00     4.0k sda\n\n"
              "     f/s f_await  aqu-sz  %util Device\n"
              "    0.00    0.00    5.40  99.8% sda\n\n")
    capture = read_iostat("Linux 6.8.0 (h) \t04/08/2025 \t_x86_64_\t(48 CPU)\n\n" + report + report)
    assert capture.reports == 1 and capture.iowait_pct == [30.0]
    [disk] = capture.disks
    assert (disk.util_pct, disk.await_ms, disk.queue_depth, disk.read_mbs, disk.iops) == (99.8, 45.1, 5.4, 1.2, 123.0)


def test_sadf_json_activities() -> None:
    # Built in json_stats.c's layout (sadf -j -- -u -r -q -d): memused is total - avail.
    record = {"timestamp": {"date": "2024-01-01", "time": "10:00:00", "utc": 1, "interval": 60},
              "cpu-load": [{"cpu": "all", "user": 5.0, "nice": 0.0, "system": 1.0, "iowait": 40.0, "steal": 0.0,
                            "idle": 54.0}],
              "memory": {"memfree": 1000, "avail": 2000, "memused": 98000, "memused-percent": 98.0, "buffers": 100,
                         "cached": 900},
              "queue": {"runq-sz": 2, "plist-sz": 300, "ldavg-1": 1.5, "ldavg-5": 1.0, "ldavg-15": 1.0, "blocked": 3},
              "disk": [{"disk-device": "sda", "tps": 100.0, "rkB": 5000.0, "wkB": 0.0, "aqu-sz": 8.0, "await": 80.0,
                        "util-percent": 99.0}]}
    capture = read_mpstat(json.dumps({"sysstat": {"hosts": [{"nodename": "h", "statistics": [record]}]}}))
    assert capture.kind == "sadf" and capture.iowait_pct == [40.0] and capture.blocked == [3.0]
    assert capture.memory is not None and capture.memory.available_pct == 2.0
    assert capture.disks[0].await_ms == 80.0 and capture.disks[0].iops == 100.0


def test_top_summary_in_other_locales() -> None:
    # Built from procps-ng's po/fr.po and po/zh_CN.po: the words are translated, the order of the values is not.
    french = ("top - 10:20:19 up  7:08,  1 user,  load average: 1,71, 1,90, 1,64\n"
              "%Cpu(s):  0,3 ut,  0,0 sy,  0,0 ni, 99,7 id,  0,0 wa,  0,0 hi,  0,0 si,  0,0 st\n"
              "MiB Mem :  32768,0 total,  22113,7 libr,   6709,7 util,   4216,7 tamp/cache\n"
              "MiB Éch :   1024,0 total,   1024,0 libr,      0,0 util.  26058,3 dispo Mem\n")
    capture = read_top(french)
    assert capture.user_pct == [0.3] and capture.idle_pct == [99.7]
    assert capture.memory is not None and capture.memory.available_pct == 79.5
    assert capture.memory.swap_total_kb == 1024 * 1024
    chinese = "%Cpu(s): 12,3 用,  1,0 系,  0,0 ni, 85,7 闲,  1,0 wa,  0,0 hi,  0,0 si,  0,0 st\n"
    assert read_top("top - 10:20:19 up 1 day\n" + chinese).idle_pct == [85.7]


def test_vmstat_with_time_stamps() -> None:
    # Built in vmstat.c's -t layout: the zone's name ends the header, each row ends with its date and time.
    text = ("procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu----- -----timestamp-----\n"
            " r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st                 UTC\n"
            " 1  0      0 123456   1000 200000    0    0     5    10  100  200  1  1 98  0  0 2024-06-01 10:00:00\n"
            " 1  2      0 123456   1000 200000    0    0     5    10  100  200  1  1 58 40  0 2024-06-01 10:00:01\n")
    capture = read_vmstat(text)
    assert capture.reports == 1 and capture.iowait_pct == [40.0] and capture.blocked == [2.0]
