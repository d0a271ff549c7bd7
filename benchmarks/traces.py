"""summarize-trace against Holistic Trace Analysis (HTA) and a bare typed decode on a generated single-rank trace.

Targets (issue 17): `gpu-triage summarize-trace` at least 10x faster than HTA's temporal breakdown (0.5 and the
current release), peak RSS <= 0.1x HTA's and < 400 MB, within 1.5x the time of a bare typed msgspec decode of the
same file (the floor a JSON reader can approach), and the same idle / compute / non-compute split as HTA (within 1
percentage point each).

Method.
- HTA 0.5.0 (PyPI `holistictraceanalysis`, the version that produced /work/shared/data/traces/hta_reference.json)
  and its current release (PyPI `traceinsight` 0.6.1, its new name; the module is still `hta`) each live in their
  own virtualenv under .cache, so neither touches the project's. The first run creates them (python -m venv, pip
  install) and later runs reuse them.
- The bare decode: our venv's python decodes the whole file at once into msgspec structs holding only name, cat,
  ph, ts, dur, pid, tid and the args correlation, External id, stream and device (no analysis; it holds every
  event, so its RSS is no target). It runs twice: as issue 17 names it, and with the structs untracked by the
  garbage collector (gc=False, as our reader's are), a lower floor.
- The input is a real Kineto trace (default: the tb_plugin resnet50 num_workers=0 sample, see `--source`) repeated
  K times to reach `--gib` uncompressed. Copy k has every `ts` (and the `external ts` arg) shifted by k x the
  original span, its `correlation` / `External id` / `external id` args and flow-event ids shifted by k x their
  range, and ProfilerStep#N renumbered to N + k x (number of steps), so all of them stay unique and increasing.
  Metadata events (ph "M") appear once, and the single `cat: "Trace"` profiler span is stretched over all copies.
  The file is written copy by copy, one event per line, as a plain .json object keeping the source's top-level keys
  (schemaVersion, deviceProperties, distributedInfo, ...), alone in a folder under .cache.
- Each side runs as its own process, `--runs` times, alternating, after the file has been read once into the page
  cache. HTA: `TraceAnalysis(trace_dir=FOLDER).get_temporal_breakdown(visualize=False)` under the HTA venv's python
  (the folder is all HTA is given; it finds the rank itself). Ours: `gpu-triage summarize-trace FOLDER --json --root
  FOLDER --timeout 600`. Wall time is measured around the process; peak RSS is the larger of wait4()'s ru_maxrss and
  the largest sum of RSS over the process tree, sampled with psutil every 0.1 s (HTA forks parser processes when it
  has more than one rank; forked children share pages with their parent, so the tree sum can over-count). A child's
  ru_maxrss also counts its parent's peak RSS at spawn time, so the trace is generated in a separate process and this
  one stays small (its own peak is printed).
- `--layouts` (issue 33): the same events written each way traces are saved (one event per line, Kineto's own
  indentation, one line as json.dump writes it, indent=2, indent=4 with CRLF, `},\n  {`, sorted keys without spaces,
  and a .gz of the one-line file), each in a folder of its own (HTA's default source, df_index_resolver, at 190 MB).
  Each layout runs `gpu-triage summarize-trace FILE --json` and the bare (tracked) decode of that same file, the .gz
  one decompressing it first; HTA runs on the first layout. One table of medians and ranges; the results of every
  layout must be the same (the file's name aside). Targets: every layout <= 1.3x its decode, the slowest layout <=
  1.2x the fastest, HTA >= 10x the slowest layout.
- Printed: every run, the median wall time and the peak RSS of each side, the ratios against the targets (OK/OVER),
  and HTA's percentages next to ours (`ranks[0].idle_pct`, `compute_pct`, `non_compute_pct`) with the differences.

Usage: .venv/bin/python benchmarks/traces.py [--gib 1.0] [--runs 3] [--reuse] [--source PATH] [--sides hta,ours]
[--layouts [all|one-per-line,one-line,...]]
`--reuse` keeps the generated trace in .cache/bench-traces/ and uses it again next time; otherwise it is deleted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache"
# HTA as it produced shared/data/traces/hta_reference.json, and its current release under its new PyPI name.
HTA_SIDES = {"HTA": (CACHE / "hta-venv", "holistictraceanalysis", "0.5.0"),
             "HTA-now": (CACHE / "traceinsight-venv", "traceinsight", "0.6.1")}
TRACES = Path("/work/shared/data/traces")
DEFAULT_SOURCE = TRACES / "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
# The issue-33 trace: HTA's df_index_resolver sample, repeated to about 190 MB.
LAYOUTS_SOURCE = TRACES / "hta/df_index_resolver/df_index_resolver.json.gz"
TRACE_NAME = "rank0.pt.trace.json"
MIB = 2**20

# Run under the HTA venv's python with the trace folder as argv[1]; prints one JSON line.
HTA_SNIPPET = """
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = a.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "breakdown_s": t3 - t2,
                  "breakdown": json.loads(df.to_json(orient="records"))}))
"""

# The floor a JSON reader can approach: one typed msgspec decode of the whole file into structs holding only the
# fields a breakdown needs. Run under our venv's python with the trace path as argv[1] and, as argv[2], whether the
# structs are tracked by the garbage collector: "1" is the decode issue 17 names; "0" (gc=False, as our reader's
# structs) is a lower floor, since the collector's passes over millions of tracked structs cost about as much as
# the decode.
DECODE_SNIPPET = """
import json, sys, time
GC = sys.argv[2] == "1"
from typing import Any
import msgspec
class Args(msgspec.Struct, gc=GC):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    stream: Any = None
    device: Any = None
class Event(msgspec.Struct, gc=GC):
    name: Any = None
    cat: Any = None
    ph: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: Args | None = None
class Trace(msgspec.Struct):
    traceEvents: list[Event]
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
if data[:2] == b"\\x1f\\x8b":  # a .gz layout: the decode pays for the decompression too, as any reader does
    import gzip
    data = gzip.decompress(data)
trace = msgspec.json.decode(data, type=Trace)
print(json.dumps({"events": len(trace.traceEvents), "decode_s": time.perf_counter() - t0}))
"""

STEP = re.compile(r"ProfilerStep#(\d+)")
PCT_KEYS = (("idle", "idle_time_pctg", "idle_pct"), ("compute", "compute_time_pctg", "compute_pct"),
            ("non-compute", "non_compute_time_pctg", "non_compute_pct"))


# --- HTA's virtualenv -------------------------------------------------------------------------------------------

def hta_python(side: str) -> Path:
    """A HTA venv's python, creating the venv and installing the pinned HTA first if needed (exits on failure)."""
    venv, dist, version = HTA_SIDES[side]
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"]
    if python.exists():
        found = subprocess.run(check, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == version:
            return python
        print(f"{venv}: no {dist}=={version} in it ({(found.stdout + found.stderr).strip()[-200:]}), "
              "installing it")
    started = time.perf_counter()
    if not python.exists():
        print(f"creating {venv} (python -m venv)")
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            sys.exit(f"could not create {venv}: {(made.stdout + made.stderr).strip()[-2000:]}")
    print(f"pip install {dist}=={version} into {venv} (once; takes a minute or two)", flush=True)
    pip = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                          f"{dist}=={version}"], capture_output=True, text=True)
    found = subprocess.run(check, capture_output=True, text=True)
    if pip.returncode != 0 or found.stdout.strip() != version:
        errors = [line for line in (pip.stdout + pip.stderr).splitlines() if not line.startswith("WARNING: Location")]
        sys.exit(f"installing {dist}=={version} failed (pip exit {pip.returncode}):\n"
                 + "\n".join(errors[-30:]))
    print(f"installed {dist} {version} in {time.perf_counter() - started:.0f} s")
    return python


# --- the generated trace ----------------------------------------------------------------------------------------

def load_trace(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    if isinstance(data, list):  # bare-array form of the Chrome trace format
        return {"traceEvents": data}
    return dict(data)


def _positive_range(values: list[int]) -> int:
    """How far to shift ids per copy so copies do not overlap (ids <= 0 mean "none" and stay as they are)."""
    ids = [v for v in values if isinstance(v, int) and v > 0]
    return max(ids) - min(ids) + 1 if ids else 0


@dataclass
class Replicator:
    """Makes copy k of a trace's events: shifted in time and with renumbered ids."""

    events: list[dict[str, Any]]
    span: float = 0
    corr_stride: int = 0
    ext_stride: int = 0
    step_stride: int = 0

    def __post_init__(self) -> None:
        timed = [e for e in self.events if isinstance(e.get("ts"), int | float)]
        self.span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
        args = [e["args"] for e in self.events if isinstance(e.get("args"), dict)]
        self.corr_stride = _positive_range([a["correlation"] for a in args if "correlation" in a]
                                           + [e["id"] for e in self.events if e.get("ph") in ("s", "t", "f")
                                              and isinstance(e.get("id"), int)])
        self.ext_stride = _positive_range([a[k] for a in args for k in ("External id", "external id") if k in a])
        steps = [int(m.group(1)) for e in self.events if (m := STEP.fullmatch(str(e.get("name", ""))))]
        self.step_stride = max(steps) - min(steps) + 1 if steps else 0

    def copy(self, k: int) -> Iterator[dict[str, Any]]:
        """Copy k of every event but metadata and the profiler span (those are written once)."""
        for event in self.events:
            if event.get("ph") == "M" or event.get("cat") == "Trace":
                continue
            if k == 0:
                yield event
                continue
            out = dict(event)
            if "ts" in out:
                out["ts"] = out["ts"] + k * self.span
            if out.get("ph") in ("s", "t", "f") and isinstance(out.get("id"), int) and out["id"] > 0:
                out["id"] += k * self.corr_stride  # flow ids are the correlation ids
            if self.step_stride and (m := STEP.fullmatch(str(out.get("name", "")))):
                out["name"] = f"ProfilerStep#{int(m.group(1)) + k * self.step_stride}"
            args = out.get("args")
            if isinstance(args, dict):
                args = out["args"] = dict(args)
                for key, stride in (("correlation", self.corr_stride), ("External id", self.ext_stride),
                                    ("external id", self.ext_stride), ("external ts", self.span)):
                    value = args.get(key)
                    if isinstance(value, int | float) and value > 0:
                        args[key] = value + k * stride
            yield out

    def once(self, copies: int) -> list[dict[str, Any]]:
        """Metadata events, and the profiler span stretched over all copies."""
        out = [e for e in self.events if e.get("ph") == "M"]
        for event in self.events:
            if event.get("cat") == "Trace" and event.get("ph") != "M":
                out.append({**event, "dur": event.get("dur", 0) + (copies - 1) * self.span})
        return out


@dataclass(frozen=True)
class Layout:
    """One way a writer lays a trace out: the text around the top-level members and around the events, each
    member's and event's text, and the line ending (the file is written in text mode with it)."""

    name: str
    opening: str
    member: Callable[[str, Any], str]
    member_separator: str
    list_opening: str
    event: Callable[[dict[str, Any]], str]
    event_separator: str
    list_closing: str
    closing: str
    sort_keys: bool = False
    newline: str = "\n"
    gzip: bool = False


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode
_COMPACT_SORTED = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def _indented(width: int) -> tuple[Callable[[str, Any], str], Callable[[dict[str, Any]], str]]:
    """json.dump(indent=width)'s members and events (the events list is one level down)."""
    encode = json.JSONEncoder(ensure_ascii=False, indent=width).encode
    pad = " " * width

    def member(key: str, value: Any) -> str:
        return pad + _ENCODE(key) + ": " + textwrap.indent(encode(value), pad)[width:]

    return member, lambda event: textwrap.indent(encode(event), pad * 2)


def _kineto_event(event: dict[str, Any]) -> str:
    """Kineto's own export: one indented block an event, its args on lines of their own."""
    fields = ", ".join(f"{_ENCODE(k)}: {_ENCODE(v)}" for k, v in event.items() if k != "args")
    args = event.get("args")
    if not isinstance(args, dict):
        return "  {\n    " + fields + "\n  }"
    inner = ", ".join(f"{_ENCODE(k)}: {_ENCODE(v)}" for k, v in args.items())
    return "  {\n    " + fields + ',\n    "args": {\n      ' + inner + "\n    }\n  }"


def _plain_member(key: str, value: Any) -> str:
    return f"{_ENCODE(key)}: {_ENCODE(value)}"


_INDENT2, _INDENT4 = _indented(2), _indented(4)
LAYOUTS = {layout.name: layout for layout in (
    # What the benchmark always wrote: one event per line.
    Layout("one-per-line", "{\n", _plain_member, ",\n", "[\n", _ENCODE, ",\n", "\n]", "\n}\n"),
    Layout("kineto", "{\n", lambda k, v: "  " + _plain_member(k, v), ",\n", "[\n", _kineto_event, ",\n", "\n]",
           "\n}\n"),
    # json.dump(trace): one line.
    Layout("one-line", "{", _plain_member, ", ", "[", _ENCODE, ", ", "]", "}"),
    # A script that re-saved the trace with json.dump(indent=2).
    Layout("indent2", "{\n", _INDENT2[0], ",\n", "[\n", _INDENT2[1], ",\n", "\n  ]", "\n}"),
    Layout("indent4-crlf", "{\n", _INDENT4[0], ",\n", "[\n", _INDENT4[1], ",\n", "\n    ]", "\n}", newline="\r\n"),
    # A generator's `},\n  {`.
    Layout("brace-comma", "{", _plain_member, ", ", "[\n  ", _ENCODE, ",\n  ", "\n]", "}"),
    # Writers that sort keys and drop the spaces (orjson / msgspec style): every object's keys in another order.
    Layout("sorted-compact", "{", lambda k, v: f"{_ENCODE(k)}:{_COMPACT_SORTED(v)}", ",", "[", _COMPACT_SORTED, ",",
           "]", "}", sort_keys=True),
    Layout("one-line-gz", "{", _plain_member, ", ", "[", _ENCODE, ", ", "]", "}", gzip=True),
)}


def generate(source: Path, path: Path, total_bytes: int, layout_name: str = "one-per-line") -> tuple[int, int]:
    """Write the replicated trace to `path` in a layout (via a .partial name, so a half-written file is never
    reused). The number of copies is set by the one-per-line size, so every layout holds the same events.

    Returns (copies, events). Only the source trace and one copy's events are held in memory at a time."""
    layout = LAYOUTS[layout_name]
    data = load_trace(source)
    replicator = Replicator(data["traceEvents"])
    copies = max(1, round(total_bytes / sum(len(_ENCODE(e).encode()) + 2 for e in replicator.copy(0))))
    keys = sorted(data) if layout.sort_keys else list(data)
    split = keys.index("traceEvents")
    partial = path.with_name(path.name + ".partial")
    events = 0
    opener: Callable[..., IO[str]] = gzip.open if layout.gzip else open
    with opener(partial, "wt", encoding="utf-8", newline=layout.newline) as out:
        out.write(layout.opening)
        for key in keys[:split]:
            out.write(layout.member(key, data[key]) + layout.member_separator)
        # The key as the layout writes it ("traceEvents": with its indentation), then the list, event by event.
        out.write(layout.member("traceEvents", []).rsplit("[", 1)[0] + layout.list_opening)
        first = True
        for k in [-1, *range(copies)]:  # -1: the events written once (metadata, the stretched profiler span)
            lines = [layout.event(e) for e in (replicator.once(copies) if k < 0 else replicator.copy(k))]
            if lines:
                out.write(("" if first else layout.event_separator) + layout.event_separator.join(lines))
                first = False
            events += len(lines)
        out.write(layout.list_closing)
        for key in keys[split + 1:]:
            out.write(layout.member_separator + layout.member(key, data[key]))
        out.write(layout.closing)
    partial.rename(path)
    return copies, events


@contextmanager
def trace_folder(source: Path, gib: float, reuse: bool) -> Iterator[Path]:
    """A folder holding only the generated trace: kept under .cache/bench-traces with --reuse, else temporary."""
    CACHE.mkdir(exist_ok=True)
    if reuse:
        folder = CACHE / "bench-traces" / f"{source.name.split('.')[0]}-{gib:g}gib"
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="bench-trace-") as tmp:
        yield Path(tmp)


# --- measuring --------------------------------------------------------------------------------------------------

@dataclass
class Run:
    wall: float
    rss_wait4: float  # MiB
    rss_tree: float  # MiB, sampled
    code: int
    stdout: str
    stderr: str
    cpu: float = 0.0  # user + system seconds (wait4): less moved by other load on the machine than the wall time

    @property
    def rss(self) -> float:
        return max(self.rss_wait4, self.rss_tree)


@dataclass
class TreeSampler:
    """Largest sum of RSS over a process and all its descendants, sampled every `interval` seconds."""

    pid: int
    interval: float = 0.1
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def measure(argv: list[str], cwd: Path) -> Run:
    """Run one process to completion: wall time, wait4() peak RSS, sampled tree RSS, exit code, output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        sampler = TreeSampler(process.pid)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:  # Ctrl-C or SIGTERM: do not leave the measured command running
            process.kill()
            process.wait()
            raise
        finally:
            tree = sampler.stop()
        wall = time.perf_counter() - started
        process.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(wall, usage.ru_maxrss / 1024, tree / MIB, code, out.read().decode(errors="replace"),
                   err.read().decode(errors="replace"), usage.ru_utime + usage.ru_stime)


def last_json(text: str) -> Any:
    """The JSON document a command printed: the whole stdout, or else its last line that parses."""
    try:
        return json.loads(text)
    except ValueError:
        for line in reversed(text.strip().splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def ours_command() -> list[str] | None:
    """gpu-triage summarize-trace, or None when this checkout does not have the command yet."""
    script = Path(sys.executable).parent / "gpu-triage"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "mcp_server.cli"]
    probe = subprocess.run([*base, "summarize-trace", "--help"], capture_output=True, text=True, cwd=REPO)
    return base if probe.returncode == 0 else None


def percentages(result: Any, table: str, side: int) -> dict[str, float] | None:
    """The three-way split from one side's JSON: `table` holds the rows, `side` picks the key column of
    PCT_KEYS (1 for HTA's names, 2 for ours)."""
    try:
        row = result[table][0]
        return {keys[0]: float(row[keys[side]]) for keys in PCT_KEYS}
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def tail(text: str, lines: int = 15) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def verdict(ok: bool) -> str:
    return "OK" if ok else "OVER"


def make_trace(folder: Path, source: Path, gib: float, layout: str) -> Path:
    """The generated trace in `folder` (written unless there already), in a layout."""
    path = folder / (TRACE_NAME + (".gz" if LAYOUTS[layout].gzip else ""))
    if path.exists():
        print(f"input: reusing {path}")
        return path
    for stale in folder.iterdir():  # e.g. a .partial from an interrupted run
        stale.unlink() if stale.is_file() else shutil.rmtree(stale)
    started = time.perf_counter()
    # In a child process: on Linux a spawned command's ru_maxrss starts from its parent's high-water RSS
    # (exec records the old mm's peak, and vfork/fork children start on the parent's mm), so this process
    # must never hold the source trace itself.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        copies, events = pool.submit(generate, source, path, int(gib * 2**30), layout).result()
    print(f"input: {source.name} x {copies} copies, {events:,} events, {layout}, written in "
          f"{time.perf_counter() - started:.1f} s")
    return path


def warm(path: Path) -> None:
    with path.open("rb") as handle:  # into the page cache
        while handle.read(1 << 24):
            pass


def _without(value: Any, name: str) -> Any:
    """A result with the trace's file name blanked (the .gz layout's file has another name)."""
    if isinstance(value, dict):
        return {k: _without(v, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(v, name) for v in value]
    return value.replace(name, "FILE") if isinstance(value, str) else value


def run_layouts(args: argparse.Namespace, commands: dict[str, list[str]]) -> None:
    """The same trace in every layout of `args.layouts`: each as a whole `gpu-triage summarize-trace FILE --json`
    process against a bare typed decode of that same file, the runs alternating; HTA on the first layout only (it
    reads every layout with json.load). One table of medians; the results must be the same in every layout."""
    names = list(LAYOUTS) if args.layouts == "all" else [n.strip() for n in args.layouts.split(",") if n.strip()]
    if not names or set(names) - set(LAYOUTS):
        sys.exit(f"--layouts takes all or any of {', '.join(LAYOUTS)}")
    if "ours" not in commands or "decode" not in commands:
        sys.exit("--layouts compares ours with the bare decode: --sides needs both")
    with trace_folder(args.source, args.gib, args.reuse) as folder:
        paths = {}
        for name in names:
            (folder / name).mkdir(exist_ok=True)
            paths[name] = make_trace(folder / name, args.source, args.gib, name)
        argv: dict[tuple[str, str], list[str]] = {}
        for name, path in paths.items():
            argv[(name, "decode")] = [*commands["decode"], str(path), "1"]
            argv[(name, "ours")] = [*commands["ours"], str(path), "--json", "--root", str(path.parent),
                                    "--timeout", "600"]
        for side in ("HTA", "HTA-now"):
            if side in commands:
                argv[(names[0], side)] = [*commands[side], str(paths[names[0]].parent)]
        results: dict[tuple[str, str], list[Run]] = {key: [] for key in argv}
        documents: dict[str, Any] = {}
        failures = 0
        for run in range(args.runs):
            for key, cmd in argv.items():
                warm(paths[key[0]])
                result = measure(cmd, paths[key[0]].parent)
                results[key].append(result)
                print(f"run {run + 1} {key[0]:15s} {key[1]:8s} {result.wall:7.2f} s (cpu {result.cpu:5.2f} s)  "
                      f"peak RSS {result.rss:7.1f} MiB  exit {result.code}", flush=True)
                document = last_json(result.stdout)
                if result.code not in ((0, 1, 2, 4) if key[1] == "ours" else (0,)) or document is None:
                    failures += 1
                    print(f"  failed (exit {result.code}); stderr tail:\n{tail(result.stderr)}")
                elif key[1] == "ours":
                    documents[key[0]] = _without(document, paths[key[0]].name)
        sizes = {name: path.stat().st_size for name, path in paths.items()}

    def med(key: tuple[str, str]) -> float:
        return statistics.median(r.wall for r in results[key])

    def cpu(key: tuple[str, str]) -> float:
        return statistics.median(r.cpu for r in results[key])

    def spread(key: tuple[str, str]) -> str:
        walls = [r.wall for r in results[key]]
        return f"{min(walls):.2f}-{max(walls):.2f}"

    print(f"\n{'layout':15s} {'size MB':>8s} {'decode s':>9s} {'(range)':>11s} {'ours s':>8s} {'(range)':>11s} "
          f"{'ours/dec':>8s} {'cpu: dec':>9s} {'ours':>6s} {'ratio':>6s} {'ours RSS':>9s}")
    ratios = {}
    for name in names:
        dec, ours = med((name, "decode")), med((name, "ours"))
        ratios[name] = ours / dec
        rss = max(r.rss for r in results[(name, "ours")])
        print(f"{name:15s} {sizes[name] / 1e6:8.0f} {dec:9.2f} {spread((name, 'decode')):>11s} {ours:8.2f} "
              f"{spread((name, 'ours')):>11s} {ratios[name]:7.2f}x {cpu((name, 'decode')):9.2f} "
              f"{cpu((name, 'ours')):6.2f} {cpu((name, 'ours')) / cpu((name, 'decode')):5.2f}x {rss:6.0f} MiB")
    fastest = min(med((n, "ours")) for n in names)
    slowest = max(med((n, "ours")) for n in names)
    worst = max(ratios.values())
    print(f"\nworst layout / its decode = {worst:.2f}x (target <= 1.3x, our check <= 1.5x) -> "
          f"{verdict(worst <= 1.3)} / {verdict(worst <= 1.5)}")
    print(f"slowest / fastest layout  = {slowest / fastest:.2f}x (target <= 1.2x) -> "
          f"{verdict(slowest / fastest <= 1.2)}")
    for side in ("HTA", "HTA-now"):
        if (names[0], side) in results:
            hta = med((names[0], side))
            hta_rss = max(r.rss for r in results[(names[0], side)])
            ours_rss = max(r.rss for name in names for r in results[(name, "ours")])
            print(f"{side:8s} {hta:.2f} s on {names[0]}: / slowest layout = {hta / slowest:.1f}x, / fastest = "
                  f"{hta / fastest:.1f}x (target >= 10x) -> {verdict(hta / slowest >= 10)}; ours RSS / HTA's = "
                  f"{ours_rss / hta_rss:.3f} (target <= 0.1) -> {verdict(ours_rss / hta_rss <= 0.1)}")
    reference = documents.get(names[0])
    differ = [name for name in names if documents.get(name) != reference]
    print(f"results identical across layouts (file name aside): {'yes' if not differ else 'NO: ' + ', '.join(differ)}")
    if failures or differ:
        sys.exit(f"{failures} run(s) failed, {len(differ)} layout(s) with another result")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=None,
                        help="size of the generated .json (GiB, uncompressed; default 1, with --layouts 190 MB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="keep the generated trace in .cache and reuse it")
    parser.add_argument("--source", type=Path, default=None,
                        help="real Kineto trace to replicate (.json or .json.gz; default the resnet50 sample, with "
                             "--layouts df_index_resolver); another good one is "
                             f"{TRACES / 'hta/trace_diff/control/control.json.gz'}")
    parser.add_argument("--sides", default="hta,hta-now,decode,ours",
                        help="which sides to run, of hta (HTA 0.5), hta-now (its current release, traceinsight), "
                             "decode (a bare typed msgspec decode) and ours")
    parser.add_argument("--layouts", nargs="?", const="all", default=None,
                        help="the same trace in each layout (all, or a comma-separated list of "
                             f"{', '.join(LAYOUTS)}), ours against the bare decode of each file; the default source is "
                             "then df_index_resolver at 190 MB")
    args = parser.parse_args()
    if args.source is None:
        args.source = LAYOUTS_SOURCE if args.layouts else DEFAULT_SOURCE
    if args.gib is None:
        args.gib = 190e6 / 2**30 if args.layouts else 1.0
    # SIGTERM unwinds like Ctrl-C, so the temporary trace folder is still deleted.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"terminated by signal {signum}"))
    sides = {s.strip() for s in args.sides.split(",") if s.strip()}
    if not sides or sides - {"hta", "hta-now", "decode", "ours"}:
        parser.error("--sides takes any of hta, hta-now, decode, ours")

    commands: dict[str, list[str]] = {}
    if "hta" in sides:
        commands["HTA"] = [str(hta_python("HTA")), "-c", HTA_SNIPPET]
    if "hta-now" in sides:
        commands["HTA-now"] = [str(hta_python("HTA-now")), "-c", HTA_SNIPPET]
    if "decode" in sides:
        commands["decode"] = [sys.executable, "-c", DECODE_SNIPPET]
        commands["decode-untracked"] = [sys.executable, "-c", DECODE_SNIPPET]
    if "ours" in sides:
        ours = ours_command()
        if ours is None:
            print("ours: `gpu-triage summarize-trace --help` fails in this checkout; measuring HTA only")
        else:
            commands["ours"] = [*ours, "summarize-trace"]
    if not commands:
        sys.exit("nothing to measure")

    if args.layouts:
        run_layouts(args, commands)
        return
    with trace_folder(args.source, args.gib, args.reuse) as folder:
        path = make_trace(folder, args.source, args.gib, "one-per-line")
        size = path.stat().st_size
        print(f"input: {path} ({size / 2**30:.2f} GiB, {size / 1e9:.2f} GB)")
        with path.open("rb") as handle:  # warm the page cache
            while handle.read(1 << 24):
                pass
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"benchmark process peak RSS {own:.0f} MiB (a floor for the wait4 figures below)")
        argv = {name: [*cmd, str(folder)] for name, cmd in commands.items()}
        for name, tracked in (("decode", "1"), ("decode-untracked", "0")):
            if name in argv:
                argv[name][-1:] = [str(path), tracked]
        if "ours" in argv:
            argv["ours"] += ["--json", "--root", str(folder), "--timeout", "600"]

        results: dict[str, list[Run]] = {name: [] for name in argv}
        parsed: dict[str, Any] = {}
        failures = 0
        for run in range(args.runs):
            for name, cmd in argv.items():
                result = measure(cmd, folder)
                results[name].append(result)
                print(f"run {run + 1} {name:5s} {result.wall:7.2f} s  peak RSS {result.rss:7.1f} MiB "
                      f"(wait4 {result.rss_wait4:.1f}, tree {result.rss_tree:.1f})  exit {result.code}", flush=True)
                document = last_json(result.stdout)
                # CLI exit codes 0/1/2/4 are ok/warning/critical/unknown verdicts; 3 is bad input or a tool failure.
                failed = result.code not in ((0, 1, 2, 4) if name == "ours" else (0,)) or document is None
                if failed:
                    failures += 1
                    print(f"  {name} failed (exit {result.code}); stderr tail:\n{tail(result.stderr)}\n"
                          f"  stdout tail:\n{tail(result.stdout, 5)}")
                else:
                    parsed[name] = document

    print()
    median = {name: statistics.median(r.wall for r in runs) for name, runs in results.items()}
    peak = {name: max(r.rss for r in runs) for name, runs in results.items()}
    for name in results:
        extra = ""
        if name in HTA_SIDES and name in parsed:
            h = parsed[name]
            extra = f"  (last run: import {h['import_s']:.1f} s, load {h['load_s']:.1f} s, " \
                    f"breakdown {h['breakdown_s']:.1f} s)"
        label = f"{HTA_SIDES[name][1]} {HTA_SIDES[name][2]}" if name in HTA_SIDES else name
        print(f"{label:26s} median {median[name]:7.2f} s ({size / MIB / median[name]:6.0f} MiB/s), "
              f"peak RSS {peak[name]:7.1f} MiB{extra}")
    for name in HTA_SIDES:
        if name in results and "ours" in results:
            speedup = median[name] / median["ours"]
            rss_ratio = peak["ours"] / peak[name]
            print(f"{name + ' time / ours':21s}= {speedup:6.2f}x (target >= 10x) -> {verdict(speedup >= 10)}")
            print(f"{'ours RSS / ' + name + ' RSS':21s}= {rss_ratio:6.3f} (target <= 0.1) -> "
                  f"{verdict(rss_ratio <= 0.1)}")
    if "decode" in results and "ours" in results:
        floor = median["ours"] / median["decode"]
        print(f"{'ours / bare decode':21s}= {floor:6.2f}x (target <= 1.5x) -> {verdict(floor <= 1.5)}")
        lower = median["ours"] / median["decode-untracked"]
        print(f"{'ours / untracked':21s}= {lower:6.2f}x (the same decode with gc=False structs: a lower floor)")
    if "ours" in results:
        ours_mb = peak["ours"] * MIB / 1e6
        print(f"ours peak RSS       = {peak['ours']:.0f} MiB = {ours_mb:.0f} MB (target < 400 MB) -> "
              f"{verdict(ours_mb < 400)}")

    hta_pct = percentages(parsed.get("HTA"), "breakdown", 1)
    our_pct = percentages(parsed.get("ours"), "ranks", 2)
    if hta_pct or our_pct:
        print()
        print(f"{'% of GPU span':14s} {'HTA':>8s} {'ours':>8s} {'diff':>8s}")
        worst = 0.0
        for name, _, _ in PCT_KEYS:
            h = hta_pct[name] if hta_pct else None
            o = our_pct[name] if our_pct else None
            diff = o - h if h is not None and o is not None else None
            worst = max(worst, abs(diff)) if diff is not None else worst
            show = [f"{v:8.2f}" if v is not None else f"{'n/a':>8s}" for v in (h, o, diff)]
            print(f"{name:14s} {' '.join(show)}")
        if hta_pct and our_pct:
            print(f"largest difference  = {worst:.2f} pp (target <= 1) -> {verdict(worst <= 1)}")
        elif "ours" in parsed and our_pct is None:
            print("ours: no ranks[0].idle_pct / compute_pct / non_compute_pct in its JSON")
    if failures:
        sys.exit(f"{failures} run(s) failed")


if __name__ == "__main__":
    main()
