"""The reader of pasted `top` screens and `top -b` output: procps-ng (3.2's `Cpu(s): 2.3%us` and 3.3+'s `%Cpu(s):
2.3 us`, per-CPU `%Cpu44 :` lines when toggled with `1`, `KiB/MiB/GiB Mem` and `Swap` lines in any locale's label:
`MiB Spch`), busybox (`CPU: 18.1% usr`, `Mem: 1234K used`), and toybox/Android (`800%cpu 527%user ... 156%idle`,
percentages of all cores together), then the process table by its header (PID or TID, S, %CPU, P, COMMAND).

Values are read by their words, never their position: the fields and their order change with versions, locales
(decimal commas) and the user's toggles. `top -b -n N` prints N frames; the first frame's CPU shares are counted
from boot, so a capture of several frames keeps the last.
"""

from __future__ import annotations

import re

from tools.host.host_formats import HostCapture, MemorySnapshot, ProcessSample

__all__ = ["is_top", "read_top"]

_VALUE = r"(\d+(?:[.,]\d+)?)"
# "%Cpu(s):", "Cpu(s):", "%Cpu44 :", "Cpu0  :", busybox "CPU:" / "CPU0:"; the label and then value-word pairs.
_CPU_LINE = re.compile(r"^[ \t]*%?(?:Cpu|CPU)(\(s\)|\d+)?[ \t]*:(.*)$", re.M)
# procps: "2,3 us" or "2.3%us"; busybox: "18.1% usr".
# Any line of the summary area that opens with a label ending in a colon (procps-ng's "%Cpu(s):", "%Cpu44 :", and
# translated ones: "%CPU:", "%CПроц.:"); 3.3+ prints us, sy, ni, id, wa, hi, si, st in this order (top_nls.c).
_NG_CPU_LINE = re.compile(r"^[ \t]*(%?)([^\s:：][^:：\n]*?)[ \t]*[:：](.*)$", re.M)
_NG_CPU_ORDER = ("user", "system", "nice", "idle", "iowait", "irq", "softirq", "steal")
_CPU_PAIR = re.compile(_VALUE + r"[ \t]*%?[ \t]*(us|usr|sy|sys|ni|nic|id|idle|wa|io|hi|irq|si|sirq|st)\b")
# toybox: "800%cpu 527%user  14%nice  85%sys 156%idle   0%iow  14%irq   4%sirq   0%host".
_TOYBOX_CPU = re.compile(r"^[ \t]*(\d+)%cpu[ \t]+(.*)$", re.M)
_TOYBOX_PAIR = re.compile(r"(\d+(?:\.\d+)?)%(user|nice|sys|idle|iow|irq|sirq|host)\b")
_LOAD = re.compile(r"load average:?[ \t]*" + _VALUE, re.I)
_BUSYBOX_RUNNING = re.compile(r"Load average:[ \t]*[\d.]+[ \t]+[\d.]+[ \t]+[\d.]+[ \t]+(\d+)/\d+")
_TASKS = re.compile(r"^[ \t]*(?:Tasks|Threads):[^\n]*?(\d+)[ \t]+running", re.M)
# A memory or swap line: an optional unit word, a label, a colon, then number-word pairs.
_MEMORY_LINE = re.compile(r"^[ \t]*(?:([KMGTPE]i?B)[ \t]+)?([A-Za-z]+)[ \t]*:[ \t]*(\d.*)$")
# procps-ng 3.3.10+ with a unit: "KiB Mem :", "MiB Spch:", "MiB 메모리 :", "KiB Éch :"; the label and the words after
# the numbers are translated, their order is not (top_nls.c): Mem total, free, used, buff/cache; Swap total, free,
# used, avail Mem.
_UNIT_MEMORY_LINE = re.compile(r"^[ \t]*([KMGTPE]iB)[ \t]+(\S[^:：\d]*?)[ \t]*[:：][ \t]*(\d.*)$")
_POSITIONAL = (("total", "free", "used", "buff/cache"), ("swap_total", "swap_free", "swap_used", "avail"))
_MEMORY_PAIR = re.compile(_VALUE + r"([KMGTkmgt]?)[ \t]+(total|free|used\.?|buff/cache|buffers|buff|cached|"
                          r"avail|shrd|shared)\b")
_UNIT_KB = {"": 1.0, "k": 1.0, "m": 1024.0, "g": 1024.0**2, "t": 1024.0**3}
_CORE_KEYS = {"us": "user", "usr": "user", "sy": "system", "sys": "system", "ni": "nice", "nic": "nice",
              "id": "idle", "idle": "idle", "wa": "iowait", "io": "iowait", "iow": "iowait", "hi": "irq", "irq": "irq",
              "si": "softirq", "sirq": "softirq", "st": "steal", "user": "user", "nice": "nice"}
_TABLE_WORDS = ("PID", "TID")
_CPU_COLUMNS = ("%CPU", "CPU%")
_COMMAND_COLUMNS = ("COMMAND", "BEFEHL", "COMMANDE", "COMANDO", "THREAD", "CMD", "ARGS")
# Columns only procps top's process table has (ps says VSZ, RSS and TIME): a table with PID and two of them is top's
# even with no summary area above it (a script that logs `top -b -p PID` rows, or a pasted table alone).
_TOP_ONLY_COLUMNS = frozenset({"VIRT", "RES", "SHR", "TIME+", "PR", "NI"})
_STATE = re.compile(r"^[RSDZTtIWXK][<Nsl+]*$")  # top's S column (man top: D, I, R, S, T, t, Z)
_SIZE = re.compile(r"^(\d+(?:[.,]\d+)?)([kmgtpe]?)$", re.I)  # VIRT/RES/SHR: KiB, or scaled with a suffix
_SIZE_KB = {"": 1.0, "k": 1.0, "m": 1024.0, "g": 1024.0**2, "t": 1024.0**3, "p": 1024.0**4, "e": 1024.0**5}


def is_top(text: str) -> bool:
    head = text[:65536]
    return (re.search(r"^top - \d", head, re.M) is not None
            or re.search(r"^[ \t]*%?Cpu\(s\)[ \t]*:", head, re.M) is not None
            or re.search(r"^[ \t]*%Cpu\d+[ \t]*:", head, re.M) is not None
            or re.search(r"^CPU\d*:[ \t]+[\d.]+%[ \t]+usr", head, re.M) is not None
            or _TOYBOX_CPU.search(head) is not None
            or any(_table_header(line) is not None and len(_TOP_ONLY_COLUMNS & set(_table_header(line) or [])) >= 2
                   for line in head.splitlines()[:200]))


def _table_header(line: str) -> list[str] | None:
    """A process table's header in top's own words, upper-cased (a logging script may write them lower-case after a
    `#`, with its own `date` column first); None when the line is not one. A lone CPU column beside MEM is %CPU
    (scripts drop the %); busybox's CPU beside %CPU is the processor."""
    tokens = [t.upper() for t in re.sub(r"[\[\]#]", " ", line).split()]
    if not any(t in _TABLE_WORDS for t in tokens[:3]):
        return None
    if not any(t in _CPU_COLUMNS for t in tokens) and "CPU" in tokens and ("MEM" in tokens or "%MEM" in tokens):
        tokens = ["%CPU" if t == "CPU" else "%MEM" if t == "MEM" else t for t in tokens]
    return tokens if any(t in _CPU_COLUMNS for t in tokens) else None


def _value(text: str) -> float:
    return float(text.replace(",", "."))


def read_top(text: str) -> HostCapture:
    frames = [f for f in re.split(r"(?m)^(?=top - \d)", text) if f.strip()]
    if any(f.startswith("top - ") for f in frames):
        frames = [f for f in frames if f.startswith("top - ")]  # not the command line pasted above the first frame
    capture = HostCapture("top")
    capture.reports = len(frames)
    frame = frames[-1] if frames else text
    _cpu(capture, frame)
    capture.memory_series = [m for m in (_memory(f) for f in frames) if m is not None]
    capture.memory = _memory(frame)
    rows = _processes(frame)
    # The same pid in several rows: a logged series of one process (top -b -p PID, one row per interval).
    latest = {row.pid: row for row in rows}
    capture.processes = list(latest.values()) if len(latest) < len(rows) else rows
    if capture.memory is None:
        capture.memory_series = _held_by_one_process(rows)
    logged = len(latest) < len(rows)
    load = _LOAD.search(frame)
    capture.load_1m = _value(load.group(1)) if load else None
    running = _TASKS.search(frame) or _BUSYBOX_RUNNING.search(frame)
    capture.tasks_running = int(running.group(1)) if running else None
    if not (capture.idle_pct or capture.core_idle or capture.memory or capture.processes):
        capture.reports = 0
    capture.what = "top" + (f", {len(frames)} frames (the last read)" if len(frames) > 1 else "")
    if logged and not (capture.idle_pct or capture.core_idle):
        capture.what = f"top process rows logged over time ({len(rows)} rows of {len(latest)} process(es), no summary)"
    return capture


def _cpu(capture: HostCapture, frame: str) -> None:
    toybox = _TOYBOX_CPU.search(frame)
    if toybox is not None:
        # Percentages of all cores together: 800%cpu is 8 cores; shares of the whole are each value / capacity.
        capacity = float(toybox.group(1)) or 100.0
        shares = {_CORE_KEYS.get(k, k): float(v) * 100 / capacity for v, k in _TOYBOX_PAIR.findall(toybox.group(2))}
        capture.cores = round(capacity / 100) or None
        _summary(capture, shares)
        return
    per_core: dict[str, dict[str, float]] = {}  # each CPU's last line, for a host figure when no summary line
    for match in _NG_CPU_LINE.finditer(frame):
        label, rest = match.group(2), match.group(3)
        numbers = re.findall(r"\d+(?:[.,]\d+)?", rest)
        values: dict[str, float] = {}
        if match.group(1) and len(numbers) == len(_NG_CPU_ORDER) and not label.startswith("Node"):
            # procps-ng 3.3+: the eight shares in one fixed order whatever words the locale gives them.
            values = dict(zip(_NG_CPU_ORDER, (_value(v) for v in numbers), strict=True))
            digits = re.search(r"(\d+)$", label)
            label = digits.group(1) if digits else None
        else:
            word = _CPU_LINE.match(match.group(0))
            if word is None:
                continue
            label = word.group(1)
            for value, key in _CPU_PAIR.findall(word.group(2)):
                values[_CORE_KEYS[key]] = values.get(_CORE_KEYS[key], 0.0) + _value(value)
        if "idle" not in values:
            continue
        if label is None or label == "(s)":
            _summary(capture, values)
        else:
            capture.core_idle.setdefault(label, []).append(values["idle"])
            capture.core_iowait.setdefault(label, []).append(values.get("iowait", 0.0))
            per_core[label] = values
    if not capture.idle_pct and per_core:
        # Only per-CPU lines: the average of the CPUs shown stands for the host's (a screen may not show all), every
        # share of it, so that CPUs idle in iowait read as waiting on I/O, not as busy.
        keys = {key for values in per_core.values() for key in values}
        _summary(capture, {key: sum(v.get(key, 0.0) for v in per_core.values()) / len(per_core) for key in keys})


def _summary(capture: HostCapture, values: dict[str, float]) -> None:
    capture.user_pct.append(round(values.get("user", 0.0) + values.get("nice", 0.0), 1))
    capture.system_pct.append(round(values.get("system", 0.0) + values.get("irq", 0.0) + values.get("softirq", 0.0),
                                    1))
    capture.idle_pct.append(round(values.get("idle", 0.0), 1))
    capture.iowait_pct.append(round(values.get("iowait", 0.0), 1))
    capture.steal_pct.append(round(values.get("steal", 0.0), 1))


def _memory(frame: str) -> MemorySnapshot | None:
    memory = MemorySnapshot()
    cached = buffers = None
    seen = False
    translated = 0  # memory lines read by position (words not English): the first is Mem, the next Swap
    for line in frame.splitlines()[:12]:  # the summary area: the process table comes after
        match = _MEMORY_LINE.match(line) or _UNIT_MEMORY_LINE.match(line)
        if match is None:
            continue
        scale = _UNIT_KB[(match.group(1) or "K")[0].lower()]
        pairs = {word.rstrip("."): _value(v) * scale * _UNIT_KB[unit.lower()]
                 for v, unit, word in _MEMORY_PAIR.findall(match.group(3))}
        if "free" not in pairs:
            numbers = re.findall(r"\d+(?:[.,]\d+)?", match.group(3))
            if match.group(1) is None or len(numbers) != 4 or translated > 1:
                continue
            names = _POSITIONAL[translated]
            translated += 1
            pairs = {name.removeprefix("swap_"): _value(v) * scale for name, v in zip(names, numbers, strict=True)}
            if names is _POSITIONAL[1]:
                seen = True
                memory.swap_total_kb, memory.swap_used_kb = pairs.get("total"), pairs.get("used")
                memory.available_kb = pairs.get("avail", memory.available_kb)
                continue
        seen = True
        if match.group(2).lower().startswith("swap") or (memory.total_kb is not None and "avail" in pairs):
            memory.swap_total_kb, memory.swap_used_kb = pairs.get("total"), pairs.get("used")
            # procps 3.3 puts MemAvailable at the swap line's end ("used.  26058,3 avail Mem"); 3.2 put cached there.
            memory.available_kb = pairs.get("avail", memory.available_kb)
            cached = pairs.get("cached", cached)
            continue
        memory.total_kb = pairs.get("total")
        memory.free_kb = pairs.get("free")
        if memory.total_kb is None and "used" in pairs:
            memory.total_kb = pairs["used"] + pairs["free"]  # busybox prints used and free only
        buffers = pairs.get("buffers", pairs.get("buff"))
        cached = pairs.get("cached", cached)
        if "buff/cache" in pairs:
            cached, buffers = pairs["buff/cache"], 0.0
    if not seen:
        return None
    memory.cache_kb = (cached or 0.0) + (buffers or 0.0) if cached is not None or buffers is not None else None
    if memory.available_kb is None and memory.free_kb is not None and cached is not None:
        # No MemAvailable printed: free + buffers + page cache, an upper bound (some cache cannot be dropped).
        memory.available_kb = memory.free_kb + cached + (buffers or 0.0)
        memory.available_estimated = True
    if memory.available_kb is not None and memory.total_kb and memory.available_kb > memory.total_kb:
        memory.available_kb = memory.free_kb  # a buffers figure larger than memory (a toybox display bug)
    return memory


def _processes(frame: str) -> list[ProcessSample]:
    rows: list[ProcessSample] = []
    header: list[str] | None = None
    for line in frame.splitlines():
        if header is None:
            found = _table_header(line)
            if found is not None:
                # Columns before PID (a logging script's date) may take several words in a row: the row is read
                # from its PID on.
                lead = next(i for i, t in enumerate(found) if t in _TABLE_WORDS)
                header = found[lead:]
            continue
        tokens = line.split()
        if not tokens:
            if rows:
                break
            continue
        start = _row_start(tokens, header)
        columns = header
        if start is None:
            anchored = _from_state(tokens, header)
            if anchored is None:
                continue
            # PID, then the columns from S on: the cells between them did not line up with the header.
            state_at, columns = anchored
            tokens = [tokens[0], *tokens[state_at:]]
            columns = [header[0], *columns]
        else:
            tokens = tokens[start:]
        cells = dict(zip(columns, tokens, strict=False))
        cpu = next((cells[c] for c in _CPU_COLUMNS if c in cells), None)
        # The command (and toybox's THREAD and PROCESS) comes last and may hold spaces: all the rest of the row.
        at = next((i for i, c in enumerate(columns) if c in _COMMAND_COLUMNS), len(columns) - 1)
        core = cells.get("P")
        memory = cells.get("%MEM")
        rows.append(ProcessSample(pid=int(tokens[0]), command=" ".join(tokens[at:]),
                                  cpu_pct=_value(cpu) if cpu and re.fullmatch(_VALUE, cpu) else None,
                                  state=cells.get("S", cells.get("STAT")),
                                  core=int(core) if core is not None and core.isdigit() else None,
                                  thread=header[0] == "TID" or "THREAD" in header,
                                  mem_pct=_value(memory) if memory and re.fullmatch(_VALUE, memory) else None,
                                  resident_kb=_size_kb(cells.get("RES")), shared_kb=_size_kb(cells.get("SHR"))))
    return rows


def _from_state(tokens: list[str], header: list[str]) -> tuple[int, list[str]] | None:
    """A row with fewer cells between its PID and its state than the header has columns (a paste that lost NI's
    blank-looking values, "20     3106324 613584 ... S  79.5"): where its state letter is, and the header's columns
    from S on, which the rest of the row fills in order (%CPU %MEM TIME+ COMMAND). None when no such state cell."""
    if "S" not in header or not tokens or not tokens[0].isdigit():
        return None
    state_at = header.index("S")
    tail = header[state_at:]
    command_at = next((i for i, c in enumerate(tail) if c in _COMMAND_COLUMNS), len(tail) - 1)
    for at in range(1, min(state_at, len(tokens))):
        if _STATE.match(tokens[at]) is None or len(tokens) - at <= command_at:
            continue
        cells = dict(zip(tail, tokens[at:], strict=False))
        cpu = next((cells[c] for c in _CPU_COLUMNS if c in cells), None)
        if cpu is not None and re.fullmatch(_VALUE, cpu):
            return at, tail
    return None


def _row_start(tokens: list[str], header: list[str]) -> int | None:
    """Where a row's PID is: its first token, or (after a logging script's date) the first number from which the
    row reads as the header says (a state letter under S, numbers under %CPU)."""
    for start in range(min(len(tokens), 6)):
        if not tokens[start].isdigit() or len(tokens) - start < len(header):
            continue
        if start == 0 and not {"S", "PR", "NI"} & set(header):
            return 0  # nothing to check the row against: as before, the first token is the PID
        cells = dict(zip(header, tokens[start:], strict=False))
        state_ok = "S" not in cells or _STATE.match(cells["S"]) is not None
        nice_ok = "NI" not in cells or re.fullmatch(r"-?\d+", cells["NI"]) is not None
        cpu = next((cells[c] for c in _CPU_COLUMNS if c in cells), None)
        if state_ok and nice_ok and (cpu is None or re.fullmatch(_VALUE, cpu)):
            return start
    return None


def _size_kb(cell: str | None) -> float | None:
    match = _SIZE.match(cell) if cell else None
    return _value(match.group(1)) * _SIZE_KB[match.group(2).lower()] if match else None


def _held_by_one_process(rows: list[ProcessSample]) -> list[MemorySnapshot]:
    """With no summary area, the most a table says of memory: the process with the largest %MEM holds RES - SHR
    privately (a single process's pages are resident once; its shared ones may be page cache), so at most the rest
    is available. One snapshot per row of that process, in order; total from RES / %MEM."""
    sized = [r for r in rows if r.mem_pct and r.resident_kb]
    if not sized:
        return []
    lead = max(sized, key=lambda r: r.mem_pct or 0.0).pid
    series = []
    for row in (r for r in sized if r.pid == lead):
        total = (row.resident_kb or 0.0) * 100 / (row.mem_pct or 1.0)
        private = (row.resident_kb or 0.0) - (row.shared_kb or 0.0)
        series.append(MemorySnapshot(total_kb=total, available_kb=max(total - private, 0.0),
                                     bound=f"{row.command} (pid {row.pid}) holds {row.mem_pct:g} % of memory "
                                           f"(RES {_gib(row.resident_kb)} GiB, SHR {_gib(row.shared_kb)} GiB)"))
    return series


def _gib(kb: float | None) -> str:
    return f"{(kb or 0.0) / 1024**2:.1f}"
