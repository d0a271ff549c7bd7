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
_CPU_PAIR = re.compile(_VALUE + r"[ \t]*%?[ \t]*(us|usr|sy|sys|ni|nic|id|idle|wa|io|hi|irq|si|sirq|st)\b")
# toybox: "800%cpu 527%user  14%nice  85%sys 156%idle   0%iow  14%irq   4%sirq   0%host".
_TOYBOX_CPU = re.compile(r"^[ \t]*(\d+)%cpu[ \t]+(.*)$", re.M)
_TOYBOX_PAIR = re.compile(r"(\d+(?:\.\d+)?)%(user|nice|sys|idle|iow|irq|sirq|host)\b")
_LOAD = re.compile(r"load average:?[ \t]*" + _VALUE, re.I)
_BUSYBOX_RUNNING = re.compile(r"Load average:[ \t]*[\d.]+[ \t]+[\d.]+[ \t]+[\d.]+[ \t]+(\d+)/\d+")
_TASKS = re.compile(r"^[ \t]*(?:Tasks|Threads):[^\n]*?(\d+)[ \t]+running", re.M)
# A memory or swap line: an optional unit word, a label, a colon, then number-word pairs.
_MEMORY_LINE = re.compile(r"^[ \t]*(?:([KMGTPE]i?B)[ \t]+)?([A-Za-z]+)[ \t]*:[ \t]*(\d.*)$")
_MEMORY_PAIR = re.compile(_VALUE + r"([KMGTkmgt]?)[ \t]+(total|free|used\.?|buff/cache|buffers|buff|cached|"
                          r"avail|shrd|shared)\b")
_UNIT_KB = {"": 1.0, "k": 1.0, "m": 1024.0, "g": 1024.0**2, "t": 1024.0**3}
_CORE_KEYS = {"us": "user", "usr": "user", "sy": "system", "sys": "system", "ni": "nice", "nic": "nice",
              "id": "idle", "idle": "idle", "wa": "iowait", "io": "iowait", "iow": "iowait", "hi": "irq", "irq": "irq",
              "si": "softirq", "sirq": "softirq", "st": "steal", "user": "user", "nice": "nice"}
_TABLE_WORDS = ("PID", "TID")
_CPU_COLUMNS = ("%CPU", "CPU%")
_COMMAND_COLUMNS = ("COMMAND", "BEFEHL", "COMMANDE", "COMANDO", "THREAD", "CMD", "ARGS")


def is_top(text: str) -> bool:
    head = text[:65536]
    return (re.search(r"^top - \d", head, re.M) is not None
            or re.search(r"^[ \t]*%?Cpu\(s\)[ \t]*:", head, re.M) is not None
            or re.search(r"^[ \t]*%Cpu\d+[ \t]*:", head, re.M) is not None
            or re.search(r"^CPU\d*:[ \t]+[\d.]+%[ \t]+usr", head, re.M) is not None
            or _TOYBOX_CPU.search(head) is not None)


def _value(text: str) -> float:
    return float(text.replace(",", "."))


def read_top(text: str) -> HostCapture:
    frames = [f for f in re.split(r"(?m)^(?=top - \d)", text) if f.strip()]
    capture = HostCapture("top")
    capture.reports = len(frames)
    frame = frames[-1] if frames else text
    _cpu(capture, frame)
    capture.memory = _memory(frame)
    capture.processes = _processes(frame)
    load = _LOAD.search(frame)
    capture.load_1m = _value(load.group(1)) if load else None
    running = _TASKS.search(frame) or _BUSYBOX_RUNNING.search(frame)
    capture.tasks_running = int(running.group(1)) if running else None
    if not (capture.idle_pct or capture.core_idle or capture.memory or capture.processes):
        capture.reports = 0
    capture.what = "top" + (f", {len(frames)} frames (the last read)" if len(frames) > 1 else "")
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
    for match in _CPU_LINE.finditer(frame):
        label, rest = match.group(1), match.group(2)
        values: dict[str, float] = {}
        for value, key in _CPU_PAIR.findall(rest):
            values[_CORE_KEYS[key]] = values.get(_CORE_KEYS[key], 0.0) + _value(value)
        if "idle" not in values:
            continue
        if label is None or label == "(s)":
            _summary(capture, values)
        else:
            capture.core_idle.setdefault(label, []).append(values["idle"])
            capture.core_iowait.setdefault(label, []).append(values.get("iowait", 0.0))
    if not capture.idle_pct and capture.core_idle:
        # Only per-CPU lines: the average of the CPUs shown stands for the host's (a screen may not show all).
        idle = [v[-1] for v in capture.core_idle.values()]
        capture.idle_pct.append(round(sum(idle) / len(idle), 1))


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
    for line in frame.splitlines()[:12]:  # the summary area: the process table comes after
        match = _MEMORY_LINE.match(line)
        if match is None:
            continue
        scale = _UNIT_KB[(match.group(1) or "K")[0].lower()]
        pairs = {word.rstrip("."): _value(v) * scale * _UNIT_KB[unit.lower()]
                 for v, unit, word in _MEMORY_PAIR.findall(match.group(3))}
        if "free" not in pairs:
            continue
        seen = True
        if match.group(2).lower().startswith("swap"):
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
            tokens = re.sub(r"[\[\]]", " ", line).split()
            if any(t in _TABLE_WORDS for t in tokens[:3]) and any(t in _CPU_COLUMNS for t in tokens):
                header = tokens
            continue
        tokens = line.split()
        if not tokens:
            if rows:
                break
            continue
        if len(tokens) < len(header) or not tokens[0].isdigit():
            continue
        cells = dict(zip(header, tokens, strict=False))
        cpu = next((cells[c] for c in _CPU_COLUMNS if c in cells), None)
        # The command (and toybox's THREAD and PROCESS) comes last and may hold spaces: all the rest of the row.
        at = next((i for i, c in enumerate(header) if c in _COMMAND_COLUMNS), len(header) - 1)
        core = cells.get("P")
        rows.append(ProcessSample(pid=int(tokens[0]), command=" ".join(tokens[at:]),
                                  cpu_pct=_value(cpu) if cpu and re.fullmatch(_VALUE, cpu) else None,
                                  state=cells.get("S", cells.get("STAT")),
                                  core=int(core) if core is not None and core.isdigit() else None,
                                  thread=header[0] == "TID" or "THREAD" in header))
    return rows
