"""The readers of saved host-metric captures: `iostat -x` (sysstat 10-12 text layouts and `-o JSON`), `vmstat`
(procps-ng, with or without the `gu` column), `mpstat` (`-P ALL`, any locale's time stamps, `Average:` blocks, `-o
JSON`; `sar -u` prints the same table) and `nvidia-smi dmon` / `pmon` (any `-s` column set, `-o DT`, the
`--format csv` form). All are read by their headers, never by column position: the column
sets change with versions and flags (notes host_evidence.md §3). A capture with several reports keeps the later ones:
the first report of iostat and the first row of vmstat are averages since boot; mpstat with an interval prints only
intervals (without one, a single report whose rows carry the header's own time stamp: since boot).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tools.core.thresholds import IOSTAT_SINCE_BOOT_SPAN_S

__all__ = ["DiskSample", "GpuSeries", "HostCapture", "MemorySnapshot", "NumaNode", "Pressure", "ProcessSample",
           "clock_span", "has_clock", "is_iostat", "is_mpstat", "is_pidstat", "is_smi_monitor", "is_time_zone",
           "is_vmstat", "is_vmstat_counters", "read_iostat", "read_mpstat", "read_smi_monitor", "read_vmstat",
           "read_vmstat_counters"]

_NUMBER = re.compile(r"^-?\d+(?:[.,]\d+)?$")
# sysstat's first line: "Linux 6.17.2-1-pve (host)   06/18/2026   _x86_64_   (96 CPU)".
SYSSTAT_BANNER = re.compile(r"^Linux[ \t]+\S+[ \t]+\(", re.M)
# sysstat stamps its rows with strftime's %X in the user's locale (S_TIME_FORMAT=ISO gives %H:%M:%S): 07:38:50 (24 h,
# followed by AM/PM where %X is %r, as in en_US), 18.25.10 (fi_FI), 10时58分18秒 (zh_CN), 18時25分10秒 (ja_JP,
# zh_TW), "18시 25분 10초" (ko_KR, three words). One token is a whole stamp, or the hour word of ko_KR's.
_CLOCK_TOKEN = re.compile(r"^\d{1,2}(?::\d{2}(?::\d{2})?|\.\d{2}\.\d{2}|[時时]\d{1,2}分(?:\d{1,2}秒)?)$")
_CLOCK_IN_TOKEN = re.compile(r"\d{1,2}(?::|[時时])\d{2}|^\d{1,2}\.\d{2}\.\d{2}$|^\d{1,2}시$")
_KOREAN_CLOCK = (re.compile(r"^\d{1,2}시$"), re.compile(r"^\d{1,2}분$"), re.compile(r"^\d{1,2}초$"))
_MERIDIEM = frozenset({"AM", "PM", "am", "pm", "a.m.", "p.m.", "上午", "下午", "午前", "午後", "오전", "오후"})
# Some locales' %X (and older sysstat builds) end the stamp with the time zone's abbreviation: "12:41:39  IST  CPU",
# "03:26:53 EDT", "12:38:33 PM IST". An upper-case word of 2-5 letters after the clock is that zone, unless it is one of
# the column labels sysstat's headers start with (CPU, DEV, IFACE, ...), which an upper-case zone name never is.
_TIME_ZONE = re.compile(r"^(?:[A-Z]{2,5}|[+-]\d{4})$")
_NOT_TIME_ZONES = frozenset({"CPU", "DEV", "IFACE", "INTR", "TTY", "FILESYSTEM", "BUS", "TEMP", "FAN", "IN", "DEVICE",
                             "FCHOST", "UID", "USER", "PID", "TGID", "TID", "NODE", "ALL", "MHZ"})


def clock_span(tokens: list[str]) -> int:
    """How many leading tokens of a row make its time stamp (a meridiem word before or after it, and a time zone's
    abbreviation after it, included); 0 when the row does not start with one."""
    at = 1 if tokens and tokens[0] in _MERIDIEM else 0
    if at < len(tokens) and _CLOCK_TOKEN.match(tokens[at]):
        at += 1
    elif at < len(tokens) and _KOREAN_CLOCK[0].match(tokens[at]):
        at += 1
        for part in _KOREAN_CLOCK[1:]:
            if at < len(tokens) and part.match(tokens[at]):
                at += 1
    else:
        return 0
    at += 1 if at < len(tokens) and tokens[at] in _MERIDIEM else 0
    return at + (1 if at < len(tokens) and is_time_zone(tokens[at]) else 0)


def is_time_zone(token: str) -> bool:
    """Whether a token after a clock is its time zone's abbreviation (IST, EDT, UTC, CEST, +0530)."""
    return _TIME_ZONE.match(token) is not None and token.upper() not in _NOT_TIME_ZONES


def has_clock(tokens: list[str]) -> bool:
    """Whether any of these tokens is (or holds) a time stamp in one of the locales above."""
    return any(_CLOCK_IN_TOKEN.search(t) for t in tokens)


@dataclass
class DiskSample:
    name: str
    util_pct: float | None = None
    await_ms: float | None = None  # the larger of r_await / w_await (or await)
    queue_depth: float | None = None  # aqu-sz (avgqu-sz before sysstat 12)
    read_mbs: float | None = None
    write_mbs: float | None = None
    iops: float | None = None

    @property
    def queue_time_ms(self) -> float | None:
        """How long a request stays queued by Little's law (requests in flight / completions per second), the
        await that the queue implies: a stalled device's await column can read 0 because few requests complete."""
        if self.queue_depth is None or not self.iops:
            return None
        return round(1000 * self.queue_depth / self.iops, 1)


@dataclass
class GpuSeries:
    """One GPU's rows of a dmon capture (a column's value per row, None for `-`), or its processes in a pmon one."""

    gpu: str
    columns: list[str]
    values: dict[str, list[float | None]] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)  # from the Date/Time columns (-o DT / -o T), when present
    pids: dict[int, list[float | None]] = field(default_factory=dict)  # pmon: pid -> its sm % per row
    commands: dict[int, str] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return max((len(v) for v in self.values.values()), default=0) or sum(len(v) for v in self.pids.values())


@dataclass
class MemorySnapshot:
    """One reading of the host's memory (top's Mem/Swap lines, free, sar -r, numastat -m), in KiB. `available_kb` is
    the kernel's MemAvailable where the tool prints it, else free + buffers + cache (free's old -/+ buffers/cache
    row), which `available_estimated` says."""

    total_kb: float | None = None
    free_kb: float | None = None
    available_kb: float | None = None
    available_estimated: bool = False
    swap_total_kb: float | None = None
    swap_used_kb: float | None = None
    cache_kb: float | None = None  # buffers + page cache, where the capture prints them (reclaim shrinks it)
    swap_cached_kb: float | None = None  # /proc/meminfo's SwapCached: pages swapped out and read back in
    # The available figure is only an upper bound: what one process's private resident memory leaves (a process
    # table with %MEM and no summary area). It can show memory running out, never clear it.
    bound: str | None = None

    @property
    def available_pct(self) -> float | None:
        if self.available_kb is None or not self.total_kb:
            return None
        return round(100 * self.available_kb / self.total_kb, 1)

    @property
    def swap_used_pct(self) -> float | None:
        if self.swap_used_kb is None or not self.swap_total_kb:
            return None
        return round(100 * self.swap_used_kb / self.swap_total_kb, 1)


@dataclass
class Pressure:
    """One /proc/pressure file's lines: the share of wall time (%) in which some (or all non-idle) tasks stalled on
    the resource, over the last 10, 60 and 300 s. `named`: the capture said which file it is."""

    resource: str  # cpu, io or memory
    some: tuple[float, float, float]
    full: tuple[float, float, float] | None = None
    named: bool = True


@dataclass
class ProcessSample:
    """One row of a process table (top, pidstat): % of one core, its state and the core it last ran on."""

    pid: int
    command: str
    cpu_pct: float | None = None
    state: str | None = None
    core: int | None = None
    thread: bool = False  # a thread's row (top -H, toybox's THREAD column, pidstat -t's TID rows)
    major_faults_s: float | None = None  # pidstat -r
    io_kbs: float | None = None  # pidstat -d: read + written
    mem_pct: float | None = None  # top's %MEM: RES of the host's memory
    resident_kb: float | None = None  # top's RES and SHR
    shared_kb: float | None = None


@dataclass
class NumaNode:
    node: str
    hit: float | None = None
    miss: float | None = None
    other_node: float | None = None
    mem_total_mb: float | None = None
    mem_free_mb: float | None = None


@dataclass
class HostCapture:
    kind: str
    disks: list[DiskSample] = field(default_factory=list)  # iostat: one per device per report after the first
    iowait_pct: list[float] = field(default_factory=list)  # per report or row
    user_pct: list[float] = field(default_factory=list)
    system_pct: list[float] = field(default_factory=list)
    idle_pct: list[float] = field(default_factory=list)
    steal_pct: list[float] = field(default_factory=list)
    run_queue: list[float] = field(default_factory=list)  # vmstat r
    blocked: list[float] = field(default_factory=list)  # vmstat b
    swap_in: list[float] = field(default_factory=list)  # vmstat si (KiB/s)
    swap_out: list[float] = field(default_factory=list)
    reports: int = 0
    since_boot: bool = False  # only the first report (or row) is there: averages since boot, no interval
    gpus: list[GpuSeries] = field(default_factory=list)  # dmon / pmon
    cores: int | None = None  # mpstat / sar: the banner's "(N CPU)", else the per-CPU rows
    core_idle: dict[str, list[float]] = field(default_factory=dict)  # mpstat -P: each CPU's %idle per report
    core_iowait: dict[str, list[float]] = field(default_factory=dict)
    memory: MemorySnapshot | None = None  # the last reading of the capture
    memory_series: list[MemorySnapshot] = field(default_factory=list)  # every reading, in order (free -s, top -b)
    pressure: list[Pressure] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)  # the last report's rows
    processes_cpu_sum: list[float] = field(default_factory=list)  # pidstat -u: the rows' %CPU summed, per report
    load_1m: float | None = None
    tasks_running: int | None = None
    major_faults_s: list[float] = field(default_factory=list)  # sar -B majflt/s per interval
    direct_scans_s: list[float] = field(default_factory=list)  # sar -B pgscand/s: reclaim by the allocating task
    numa: list[NumaNode] = field(default_factory=list)
    interfaces: dict[str, float | None] = field(default_factory=dict)  # sar -n DEV: interface -> peak %ifutil
    what: str = ""  # the sections it was read from (sar -u, -r...), for coverage

    @property
    def host_evidence(self) -> bool:
        """Whether it holds anything about the host's disks, CPUs or memory (a dmon capture holds none)."""
        return bool(self.disks or self.idle_pct or self.iowait_pct or self.run_queue or self.swap_in
                    or self.memory is not None or self.memory_series or self.pressure or self.processes or self.numa
                    or self.core_idle or self.major_faults_s or self.interfaces)


def _number(text: str) -> float | None:
    text = text.replace(",", ".")  # locales that print decimal commas
    return float(text) if _NUMBER.match(text) else None


def is_iostat(text: str) -> bool:
    # [ \t], not \s: a \s* at a line start would run on across blank lines (quadratic on 10^5 of them).
    # `iostat -c` prints the avg-cpu report alone, with no device header.
    return (re.search(r"^Device:?[ \t]", text, re.M) is not None or '"sysstat"' in text[:2000]
            or _PRETTY_HEADER.search(text[:65536]) is not None
            or re.search(r"^[ \t]*avg-cpu:[ \t]+%", text[:65536], re.M) is not None)


# --pretty (and -h, which implies it) prints the device name last, in the header ("... %util Device") and rows; -h
# also splits -x into up to four parts per report (r, w, d, then f/aqu-sz/%util), each with its own header, and
# prints sizes with a unit letter (512.0k, 1.2M: sysstat's cprintf_unit, powers of 1024) and shares with a %.
_PRETTY_HEADER = re.compile(r"^[ \t]*(?:tps|r/s|w/s|d/s|f/s)[ \t][^\n]*[ \t]Device[ \t]*$", re.M)
_HUMAN = re.compile(r"^(-?\d+(?:[.,]\d+)?)([BkMGTP])$")
_HUMAN_KB = {"B": 1 / 1024, "k": 1.0, "M": 1024.0, "G": 1024.0**2, "T": 1024.0**3, "P": 1024.0**4}


# An iostat command line (after a shell prompt, or alone) whose short options include y: "iostat -xy 1 1",
# "# iostat -d -y -x 5". Long options (--dec=2, --human) and arguments are not option clusters.
_IOSTAT_Y = re.compile(r"^[^\n]*?(?:^|[\s$#>])iostat(?:[ \t]+(?!-y)\S+)*?[ \t]+-(?!-)[A-Za-z]*y[A-Za-z]*(?=[ \t]|$)",
                       re.M)


def _iostat_number(text: str) -> float | None:
    """A cell of iostat text: a plain number, a share with -h's %, or a size with its unit letter (in kB, the unit
    of the kB columns it is printed under)."""
    human = _HUMAN.match(text)
    if human is not None:
        return float(human.group(1).replace(",", ".")) * _HUMAN_KB[human.group(2)]
    return _number(text.removesuffix("%"))


def is_vmstat(text: str) -> bool:
    # A prefix before the header (a timestamp that `ts` or a logging loop put on every line) is the capture's too.
    return re.search(r"(?:^|[ \t])r[ \t]+b[ \t]+swpd[ \t]+free", text, re.M) is not None


def _totals_span_since_boot(disks: dict[str, dict[str, float | None]]) -> bool:
    """iostat's default report prints each device's total beside its rate (Blk_read and Blk_read/s, kB_wrtn and
    kB_wrtn/s): the total over the rate is the span the report averages. A span of hours is the averages since boot,
    whatever the paste kept of the banner (an interval report's total is its rate times the interval)."""
    for cells in disks.values():
        for column, total in cells.items():
            rate = cells.get(f"{column}/s")
            if not column.endswith("/s") and total is not None and rate and total / rate >= IOSTAT_SINCE_BOOT_SPAN_S:
                return True
    return False


def read_iostat(text: str) -> HostCapture:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except json.JSONDecodeError:
            # sysstat 12.1's -y writes a stray comma where the first report was skipped: read past it.
            document = json.loads(re.sub(r",(\s*[\]}])", r"\1", re.sub(r"\[\s*,", "[", stripped)))
        return _iostat_json(document)
    capture = HostCapture("iostat")
    # Per report: each device's cells (merged across -h's parts), the CPU shares, the columns seen so far.
    reports: list[tuple[dict[str, dict[str, float | None]], list[float], set[str]]] = []
    # Per report: whether a banner came before it since the last report. A banner starts a new iostat run, and a
    # run's first report is the averages since boot: `iostat -x sdb` in a shell loop prints only such reports.
    after_banner: list[bool] = []
    banner = False
    header: list[str] | None = None
    device_last = False
    cpu_header: list[str] | None = None

    def new_report() -> None:
        nonlocal banner
        reports.append(({}, [], set()))
        after_banner.append(banner)
        banner = False

    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            header = None
            continue
        if SYSSTAT_BANNER.match(line):
            banner = True
            continue
        if tokens[0] == "avg-cpu:":
            cpu_header = [t.lstrip("%") for t in tokens[1:]]
            new_report()
            continue
        if cpu_header is not None and all(_iostat_number(t) is not None for t in tokens):
            values = dict(zip(cpu_header, (_iostat_number(t) or 0.0 for t in tokens), strict=False))
            if not reports:
                new_report()
            reports[-1][1].extend([values.get("iowait", 0.0), values.get("user", 0.0), values.get("system", 0.0),
                                   values.get("idle", 0.0), values.get("steal", 0.0)])
            cpu_header = None
            continue
        if tokens[0].rstrip(":") == "Device" or (tokens[-1] == "Device" and _PRETTY_HEADER.match(line)):
            device_last = tokens[0].rstrip(":") != "Device"
            header = [t.lstrip("%") for t in (tokens[:-1] if device_last else tokens[1:])]
            # A header whose columns this report has not had yet is the next part of it (-h); else a new report.
            if not reports or (reports[-1][0] and set(header) & reports[-1][2]):
                new_report()
            reports[-1][2].update(header)
            continue
        if header is not None and len(tokens) >= 2:
            name, cells = (tokens[-1], tokens[:-1]) if device_last else (tokens[0], tokens[1:])
            reports[-1][0].setdefault(name, {}).update(
                {h: _iostat_number(v) for h, v in zip(header, cells, strict=False)})
    # -y omits the report since boot: then the first report is an interval too. The capture says so only where it
    # keeps the command line it was run with ("$ iostat -xy 1 1").
    skipped = _IOSTAT_Y.search(text[:65536]) is not None
    # A report is since boot after a banner, or when its totals span hours.
    boot_report = [after or _totals_span_since_boot(disks) for after, (disks, _, _) in zip(after_banner, reports,
                                                                                          strict=True)]
    chosen = range(1, len(reports)) if len(reports) > 1 and not skipped else range(len(reports))
    kept = [reports[i] for i in chosen if skipped or not boot_report[i]]
    # One report is the averages since boot only when the capture starts where iostat does (its banner): a pasted
    # block without it may be any interval. Reports that each follow a banner are all since boot.
    every_run_since_boot = not kept and (len(reports) > 1 or any(boot_report))
    capture.since_boot = not skipped and ((len(reports) == 1 and SYSSTAT_BANNER.search(text) is not None)
                                          or every_run_since_boot)
    kept = kept or reports
    capture.reports = len(kept)
    for disks, cpu, _ in kept:
        capture.disks.extend(_disk(name, cells) for name, cells in disks.items())
        if len(cpu) == 5:
            for column, value in zip((capture.iowait_pct, capture.user_pct, capture.system_pct, capture.idle_pct,
                                      capture.steal_pct), cpu, strict=True):
                column.append(value)
    return capture


def _disk(name: str, values: Mapping[str, float | None]) -> DiskSample:
    def first(*names: str) -> float | None:
        return next((values[n] for n in names if values.get(n) is not None), None)

    waits = [v for k, v in values.items() if k in ("r_await", "w_await", "await", "d_await") and v is not None]
    # iostat -x names its rates rMB/s, rkB/s or rsec/s; plain iostat (no -x) kB_read/s, MB_read/s or, before
    # sysstat 6, Blk_read/s (512-byte blocks), with tps for the transfers (IOPS) and no await, queue or %util.
    # sar -d says rkB/s (sysstat 12) or rd_sec/s (sectors, before).
    reads = first("rMB/s", "MB_read/s", "rkB/s", "kB_read/s", "rsec/s", "rd_sec/s", "Blk_read/s")
    writes = first("wMB/s", "MB_wrtn/s", "wkB/s", "kB_wrtn/s", "kB_w+d/s", "wsec/s", "wr_sec/s", "Blk_wrtn/s")
    scale = (1.0 if "rMB/s" in values or "MB_read/s" in values else
             1 / 1024 if "rkB/s" in values or "kB_read/s" in values or "kB_w+d/s" in values else 512 / 2**20)
    iops = (first("r/s") or 0.0) + (first("w/s") or 0.0) if "r/s" in values or "w/s" in values else first("tps")
    return DiskSample(name=name, util_pct=first("util"), await_ms=max(waits) if waits else None,
                      queue_depth=first("aqu-sz", "avgqu-sz"),
                      read_mbs=reads * scale if reads is not None else None,
                      write_mbs=writes * scale if writes is not None else None, iops=iops if iops is not None else 0.0)


def _iostat_json(document: Any) -> HostCapture:
    capture = HostCapture("iostat")
    hosts = document.get("sysstat", {}).get("hosts", []) if isinstance(document, dict) else []
    statistics = [s for h in hosts if isinstance(h, dict) for s in h.get("statistics", []) if isinstance(s, dict)]
    kept = statistics[1:] if len(statistics) > 1 else statistics
    capture.reports = len(kept)
    for report in kept:
        cpu = report.get("avg-cpu")
        if isinstance(cpu, dict):
            capture.iowait_pct.append(float(cpu.get("iowait", 0)))
            capture.user_pct.append(float(cpu.get("user", 0)))
            capture.system_pct.append(float(cpu.get("system", 0)))
            capture.idle_pct.append(float(cpu.get("idle", 0)))
            capture.steal_pct.append(float(cpu.get("steal", 0)))
        for disk in report.get("disk", []) or []:
            if isinstance(disk, dict) and isinstance(disk.get("disk_device"), str):
                values = {str(k): float(v) for k, v in disk.items() if isinstance(v, int | float)}
                capture.disks.append(_disk(disk["disk_device"], values))
    return capture


def read_vmstat(text: str) -> HostCapture:
    capture = HostCapture("vmstat")
    header: list[str] | None = None
    prefix = 0  # tokens before vmstat's own on every line (`2024-06-01 10:00:00  r  b  swpd ...`)
    rows: list[dict[str, float | None]] = []
    for line in text.splitlines():
        tokens = line.split()
        at = next((i for i in range(len(tokens) - 3) if tokens[i:i + 4] == ["r", "b", "swpd", "free"]), None)
        if at is not None:
            # vmstat's fields are lower-case words; -t appends the time zone's name (UTC, CEST) for its stamp.
            header, prefix = [t for t in tokens[at:] if t.isalpha() and t.islower()], at
            continue
        tokens = tokens[prefix:]
        if header is None or len(tokens) < len(header):
            continue
        values, stamp = tokens[:len(header)], tokens[len(header):]
        # -t: each row ends with its date and time (2024-06-01 10:00:01), which procps before 3.3.13 followed with
        # the time zone's abbreviation (2012-09-02 14:57:18 IST); newer ones print the zone in the header instead.
        timed = len(stamp) in (2, 3) and ":" in stamp[1] and (len(stamp) == 2 or is_time_zone(stamp[2]))
        if all(_number(t) is not None for t in values) and (not stamp or timed):
            rows.append(dict(zip(header, (_number(t) for t in values), strict=True)))
    kept = rows[1:] if len(rows) > 1 else rows  # the first row averages since boot
    capture.reports, capture.since_boot = len(kept), len(rows) == 1
    for row in kept:
        for column, key in ((capture.run_queue, "r"), (capture.blocked, "b"), (capture.swap_in, "si"),
                            (capture.swap_out, "so"), (capture.user_pct, "us"), (capture.system_pct, "sy"),
                            (capture.idle_pct, "id"), (capture.iowait_pct, "wa"), (capture.steal_pct, "st")):
            value = row.get(key)
            if value is not None:
                column.append(value)
    return capture


# ---------------------------------------------------------------- vmstat -s

# procps `vmstat -s`: one counter a line, "   253528 K total memory", "  5647 non-nice user cpu ticks". Memory lines
# are the present; the ticks and page counts are totals since boot, so only the difference between two reports (a
# script that logs `date; vmstat -s` every interval) is a sample.
_COUNTER = re.compile(r"^[ \t]*(\d+)[ \t]+(?:K[ \t]+)?([a-zA-Z][\w /-]*?)[ \t]*$")
_TICKS = {"non-nice user cpu ticks": "user", "nice user cpu ticks": "nice", "system cpu ticks": "system",
          "idle cpu ticks": "idle", "IO-wait cpu ticks": "iowait", "IRQ cpu ticks": "irq",
          "softirq cpu ticks": "softirq", "stolen cpu ticks": "steal"}
_STAMP = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2}):(\d{2})(?![\d:])")
PAGE_KB = 4  # the page size of x86-64 and of ARM's default kernels: vmstat -s counts swap traffic in pages


def is_vmstat_counters(text: str) -> bool:
    head = text[:16384]
    return (re.search(r"^[ \t]*\d+[ \t]+K[ \t]+total memory[ \t]*$", head, re.M) is not None
            and re.search(r"^[ \t]*\d+[ \t]+idle cpu ticks[ \t]*$", head, re.M) is not None)


def read_vmstat_counters(text: str) -> HostCapture:
    """Each `total memory` line starts a report; a time stamp on a line before it (`date` in the logging loop)
    dates it. CPU shares and swap traffic come from consecutive reports; one report is since boot."""
    reports: list[tuple[float | None, dict[str, float]]] = []
    stamp: float | None = None
    for line in text.splitlines():
        match = _COUNTER.match(line)
        if match is None:
            clock = _STAMP.search(line)
            if clock is not None:
                stamp = int(clock.group(1)) * 3600.0 + int(clock.group(2)) * 60 + int(clock.group(3))
            continue
        name = match.group(2).strip()
        if name == "total memory" or not reports:
            reports.append((stamp, {}))
            stamp = None
        reports[-1][1][name] = float(match.group(1))
    capture = HostCapture("vmstat -s")
    capture.reports = max(len(reports) - 1, 1) if reports else 0
    capture.since_boot = len(reports) == 1
    capture.what = "vmstat -s"
    if reports:
        last = reports[-1][1]
        cache = last.get("buffer memory", 0.0) + last.get("swap cache", 0.0)  # procps 3.2 names the page cache so
        capture.memory = MemorySnapshot(total_kb=last.get("total memory"), free_kb=last.get("free memory"),
                                        available_kb=(last["free memory"] + cache) if "free memory" in last else None,
                                        available_estimated=True, swap_total_kb=last.get("total swap"),
                                        swap_used_kb=last.get("used swap"), cache_kb=cache)
    for (before_at, before), (after_at, after) in zip(reports, reports[1:], strict=False):
        ticks = {key: after.get(name, 0.0) - before.get(name, 0.0) for name, key in _TICKS.items()}
        total = sum(ticks.values())
        if total > 0:
            capture.user_pct.append(round(100 * (ticks["user"] + ticks["nice"]) / total, 2))
            capture.system_pct.append(round(100 * (ticks["system"] + ticks["irq"] + ticks["softirq"]) / total, 2))
            capture.idle_pct.append(round(100 * ticks["idle"] / total, 2))
            capture.iowait_pct.append(round(100 * ticks["iowait"] / total, 2))
            capture.steal_pct.append(round(100 * ticks["steal"] / total, 2))
        seconds = (after_at - before_at) % 86400 if before_at is not None and after_at is not None else None
        if seconds:  # swap traffic as vmstat's si/so (KiB/s) only when the reports are dated
            for column, name in ((capture.swap_in, "pages swapped in"), (capture.swap_out, "pages swapped out")):
                column.append(round((after.get(name, 0.0) - before.get(name, 0.0)) * PAGE_KB / seconds, 2))
    return capture


# ---------------------------------------------------------------- mpstat / sar -u

# The column header: "CPU" then percentages, %idle among them (mpstat's %usr..%gnice, sar -u's %user..%idle); pidstat's
# header ends "%CPU   CPU  Command" and iostat's says "avg-cpu:", so neither matches.
_CPU_TABLE = re.compile(r"(?:^|[ \t])CPU[ \t]+%(?:usr|user)[ \t][^\n]*%idle", re.M)
_PIDSTAT = re.compile(r"[ \t]PID[ \t]+%usr[ \t]+%system[^\n]*%CPU", re.M)
_BANNER_CPUS = re.compile(r"\((\d+) CPU\)")


# The activities of sysstat's JSON (mpstat -o JSON, sadf -j: json_stats.c) that are read; iostat's JSON says
# "avg-cpu" and "disk_device" instead and has its own reader.
_JSON_ACTIVITIES = ('"cpu-load"', '"memory"', '"paging"', '"swap-pages"', '"queue"', '"disk-device"')


def is_mpstat(text: str) -> bool:
    head = text[:65536]
    return _CPU_TABLE.search(head) is not None or ('"sysstat"' in head and any(a in head for a in _JSON_ACTIVITIES))


def is_pidstat(text: str) -> bool:
    return _PIDSTAT.search(text[:65536]) is not None


def read_mpstat(text: str) -> HostCapture:
    """mpstat / sar -u text: every header line starts a report; a row is its CPU label (`all` or a number) and one
    number per header column, after the time stamp (12 h with AM/PM, 24 h, or a locale's own words). Rows whose
    prefix holds no time stamp (`Average:`, `平均时间:`) are the averages of the intervals: used only when the capture
    has no interval rows (one that kept only the averages)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _mpstat_json(json.loads(stripped))
    header: list[str] | None = None
    header_time: list[str] = []
    intervals: list[dict[str, dict[str, float]]] = []  # per report: CPU label -> column -> value
    averages: dict[str, dict[str, float]] = {}
    single_time: list[str] | None = None
    sar = False
    for line in text.splitlines():
        tokens = line.split()
        if "CPU" in tokens:
            at = tokens.index("CPU")
            columns = tokens[at + 1:]
            # sysstat before 9 ended mpstat's CPU table with intr/s (a rate, not a share): read by its name too.
            if columns and all(c.startswith("%") or c.endswith("/s") for c in columns) and "%idle" in columns:
                header, header_time = [c.lstrip("%") for c in columns], tokens[:at]
                sar = sar or "user" in header
                if has_clock(header_time):
                    intervals.append({})
                continue
            if columns and all(_number(c) is None for c in columns):
                # Another table's header (mpstat -I: intr/s, one column per interrupt, or HI/s TIMER/s ... RCU/s,
                # which has as many columns as the CPU table): its rows are not CPU shares.
                header = None
                continue
        if header is None or len(tokens) < len(header) + 1:
            continue
        label, cells = tokens[-len(header) - 1], [_number(t) for t in tokens[-len(header):]]
        if not (label == "all" or label.isdigit()) or any(c is None for c in cells):
            continue
        prefix = tokens[:-len(header) - 1]
        values = dict(zip(header, (c or 0.0 for c in cells), strict=True))
        if prefix and not has_clock(prefix):
            averages[label] = values
            continue
        if not intervals or label in intervals[-1]:  # `mpstat 1` prints one header, then a row per interval
            intervals.append({})
        intervals[-1][label] = values
        single_time = prefix if single_time is None else single_time
    kept = [report for report in intervals if report] or ([averages] if averages else [])
    capture = HostCapture("sar" if sar else "mpstat")
    capture.reports = len(kept)
    # No interval: one report whose rows carry the header's own time stamp (mpstat prints no Average then).
    capture.since_boot = len(kept) == 1 and not averages and bool(header_time) and single_time == header_time
    for report in kept:
        _cpu_row(capture, report)
    banner = _BANNER_CPUS.search(text[:4096])
    capture.cores = int(banner.group(1)) if banner else (len(capture.core_idle) or None)
    return capture


def _cpu_row(capture: HostCapture, report: Mapping[str, Mapping[str, float]]) -> None:
    """One report's `all` row into the series (user = usr + nice, system = sys + irq + soft, as /proc/stat is read
    live), and each CPU's idle and iowait."""
    for label, values in report.items():
        if label != "all":
            capture.core_idle.setdefault(label, []).append(values.get("idle", 0.0))
            capture.core_iowait.setdefault(label, []).append(values.get("iowait", 0.0))
    row = report.get("all")
    if row is None:
        return
    capture.user_pct.append(round(row.get("usr", row.get("user", 0.0)) + row.get("nice", 0.0), 2))
    capture.system_pct.append(round(row.get("sys", row.get("system", 0.0)) + row.get("irq", 0.0)
                                    + row.get("soft", 0.0), 2))
    capture.iowait_pct.append(row.get("iowait", 0.0))
    capture.steal_pct.append(row.get("steal", 0.0))
    capture.idle_pct.append(row.get("idle", 0.0))


def _mpstat_json(document: Any) -> HostCapture:
    """mpstat -o JSON and sadf -j: sysstat.hosts[].statistics[], each with a `cpu-load` list of {cpu, usr (user),
    nice, sys (system), ...}, and for sadf the other activities asked for: `memory` {memfree, avail, memused,
    buffers, cached, swpfree, swpused} (memused = total - avail), `paging` {majflt, pgscand}, `swap-pages` {pswpin,
    pswpout}, `queue` {runq-sz, blocked, ldavg-1} and `disk` [{disk-device, tps, rkB, wkB, aqu-sz, await,
    util-percent}]."""
    hosts = document.get("sysstat", {}).get("hosts", []) if isinstance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in (h for h in hosts if isinstance(h, dict)):
        if isinstance(host.get("number-of-cpus"), int):
            capture.cores = host["number-of-cpus"]
        for report in (s for s in host.get("statistics", []) if isinstance(s, dict)):
            if isinstance(report.get("timestamp"), dict):
                capture.kind = "sadf"  # sadf -j dates each record; mpstat prints its clock only
            rows = {str(r.get("cpu")): _numbers(r) for r in report.get("cpu-load", []) or [] if isinstance(r, dict)}
            read = bool(rows)
            if rows:
                _cpu_row(capture, {("all" if label == "-1" else label): row for label, row in rows.items()})
            read = _json_activities(capture, report) or read
            capture.reports += read
    return capture


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _json_activities(capture: HostCapture, report: Mapping[str, Any]) -> bool:
    """sadf -j's activities other than CPU into the capture; whether the report held any."""
    read = False
    memory = report.get("memory")
    if isinstance(memory, dict) and ("memfree" in memory or "swpfree" in memory):
        values = _numbers(memory)
        snapshot = MemorySnapshot(free_kb=values.get("memfree"), available_kb=values.get("avail"),
                                  cache_kb=(values["buffers"] + values["cached"]) if "buffers" in values
                                  and "cached" in values else None)
        if "avail" in values and "memused" in values:
            snapshot.total_kb = values["avail"] + values["memused"]
        if "swpfree" in values and "swpused" in values:
            snapshot.swap_total_kb, snapshot.swap_used_kb = values["swpfree"] + values["swpused"], values["swpused"]
        capture.memory_series.append(snapshot)
        capture.memory = snapshot
        read = True
    for key, column, name in (("paging", capture.major_faults_s, "majflt"),
                              ("paging", capture.direct_scans_s, "pgscand"),
                              ("swap-pages", capture.swap_in, "pswpin"), ("swap-pages", capture.swap_out, "pswpout"),
                              ("queue", capture.run_queue, "runq-sz"), ("queue", capture.blocked, "blocked")):
        activity = report.get(key)
        if isinstance(activity, dict) and isinstance(activity.get(name), int | float):
            column.append(float(activity[name]))
            read = True
    queue = report.get("queue")
    if isinstance(queue, dict) and isinstance(queue.get("ldavg-1"), int | float):
        capture.load_1m = float(queue["ldavg-1"])
    for disk in report.get("disk", []) or []:
        if isinstance(disk, dict) and isinstance(disk.get("disk-device"), str):
            values = _numbers(disk)
            values["util"] = values.get("util-percent", 0.0)
            values["rkB/s"], values["wkB/s"] = values.get("rkB", 0.0), values.get("wkB", 0.0)
            sample = _disk(disk["disk-device"], values)
            sample.iops = values.get("tps")
            capture.disks.append(sample)
            read = True
    return read


# ---------------------------------------------------------------- nvidia-smi dmon / pmon

_MONITOR_HEADER = re.compile(r"^#[ \t]*(?:Date[ \t]*,?[ \t]*)?(?:Time[ \t]*,?[ \t]*)?gpu\b", re.I | re.M)


def is_smi_monitor(text: str) -> bool:
    return _MONITOR_HEADER.search(text[:65536]) is not None


def read_smi_monitor(text: str) -> HostCapture:
    """dmon or pmon by its header: the first `#` line names the columns, the second gives units and is skipped; the
    header repeats every screenful. pmon's last column (the command) may hold spaces; `-` is no value."""
    names: list[str] | None = None
    by_gpu: dict[str, GpuSeries] = {}
    kind = "dmon"
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").replace(",", " ").split()
            if tokens and any(t.lower() == "gpu" for t in tokens[:3]):
                names = [t.lower() for t in tokens]
                kind = "pmon" if "pid" in names else "dmon"
            continue
        if names is None:
            continue
        tokens = stripped.replace(",", " ").split() if "," in stripped else stripped.split()
        if len(tokens) < len(names) - (1 if kind == "pmon" else 0):
            continue
        if kind == "pmon" and len(tokens) > len(names):
            tokens = tokens[: len(names) - 1] + [" ".join(tokens[len(names) - 1:])]
        cells = dict(zip(names, tokens, strict=False))
        gpu = cells.get("gpu", "?")
        series = by_gpu.setdefault(gpu, GpuSeries(gpu=gpu, columns=[n for n in names if n not in _NOT_METRICS]))
        if kind == "pmon":
            pid = _number(cells.get("pid", "-"))
            if pid is None:
                continue  # a GPU with no process prints `-` for the pid
            series.pids.setdefault(int(pid), []).append(_number(cells.get("sm", "-")))
            series.commands.setdefault(int(pid), cells.get("command", "-"))
            continue
        for name in series.columns:
            series.values.setdefault(name, []).append(_number(cells.get(name, "-")))
        at = _seconds(cells.get("date"), cells.get("time"))
        if at is not None:
            series.seconds.append(at)
    capture = HostCapture(kind, gpus=list(by_gpu.values()))
    capture.reports = max((g.rows for g in capture.gpus), default=0)
    return capture


_NOT_METRICS = ("gpu", "date", "time", "pid", "type", "command")


def _seconds(date: str | None, clock: str | None) -> float | None:
    """Seconds of a row's Date (YYYYMMDD) and Time (HH:MM:SS): only differences between rows are used."""
    if clock is None or not re.fullmatch(r"\d{1,2}:\d{2}:\d{2}", clock):
        return None
    hours, minutes, seconds = (int(x) for x in clock.split(":"))
    days = 0
    if date is not None and re.fullmatch(r"\d{8}", date):
        try:
            days = datetime.date(int(date[:4]), int(date[4:6]), int(date[6:])).toordinal()
        except ValueError:
            return None
    return days * 86400.0 + hours * 3600 + minutes * 60 + seconds
