"""The one reader of `py-spy record` output: raw (collapsed) text and speedscope JSON, into samples per process and
thread.

raw (benfred/py-spy src/flamegraph.rs): one line per unique stack, `frame;frame;...;frame COUNT`, root first, leaf
last; a frame is `name (short_filename:line)`, `name (file)` or `name`; with `--subprocesses` the stack starts with
`process PID:"cmdline"` frames (the parent chain, the sampled process last), with `--threads` then
`thread (TID): NAME`. speedscope (src/speedscope.rs): one sampled profile per (process, thread), named
`[Process PID ]Thread TID "NAME"`, samples as lists of indexes into shared frames, root first. Neither marks idle
samples: with `--idle` they are in, and told here by their leaf (a wait, a select, a queue get, a sleep).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Frame", "ThreadSamples", "is_idle_leaf", "read_raw", "read_speedscope"]

_PROCESS = re.compile(r'^process (\d+):"(.*)"$')
_THREAD = re.compile(r"^thread \((\w+)\)(?:: (.*))?$")
_FRAME = re.compile(r"^(?P<name>.+?)(?: \((?P<file>[^()]*?)(?::(?P<line>\d+))?\))?$")
_COUNT = re.compile(r"^(.*) (\d+)$")
# Leaves where a thread waits rather than runs (py-spy's own idle heuristic, and the queue and socket waits).
_IDLE_FILES = ("threading.py", "selectors.py", "queue.py", "multiprocessing/connection.py", "socket.py",
               "multiprocessing/synchronize.py", "multiprocessing/queues.py", "asyncio/base_events.py")
_IDLE_NAMES = frozenset({"wait", "select", "poll", "_poll", "epoll", "sleep", "acquire", "recv", "recv_into",
                         "recv_bytes", "_recv", "_recv_bytes", "accept", "get", "join", "waitpid",
                         "_wait_for_tstate_lock"})


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    @property
    def short(self) -> str:
        """The function without its class (py-spy 0.4 names methods `Class.method`)."""
        return self.function.rsplit(".", 1)[-1]


@dataclass
class ThreadSamples:
    """The stacks sampled in one thread of one process (pid None when py-spy did not record it)."""

    pid: int | None
    command: str
    thread: str  # the Python thread's name, or its id
    stacks: Counter[tuple[Frame, ...]] = field(default_factory=Counter)  # root first

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())


def is_idle_leaf(frame: Frame) -> bool:
    return frame.short in _IDLE_NAMES and (frame.file.endswith(_IDLE_FILES) or frame.file == "")


def _frame(text: str) -> Frame:
    found = _FRAME.match(text)
    if found is None:
        return Frame(text, "", None)
    return Frame(found.group("name"), found.group("file") or "", int(found.group("line")) if found.group("line")
                 else None)


def read_raw(text: str, max_stacks: int) -> list[ThreadSamples]:
    """The raw (collapsed) format; at most `max_stacks` distinct stacks are read."""
    threads: dict[tuple[int | None, str], ThreadSamples] = {}
    for number, line in enumerate(text.splitlines()):
        if number >= max_stacks:
            break
        counted = _COUNT.match(line.strip())
        if counted is None:
            continue
        parts = counted.group(1).split(";")
        pid, command, thread = None, "", "?"
        frames: list[Frame] = []
        for part in parts:
            if (process := _PROCESS.match(part)) is not None:
                pid, command = int(process.group(1)), process.group(2)  # the last one is the sampled process
            elif (named := _THREAD.match(part)) is not None and not frames:
                thread = named.group(2) or named.group(1)
            else:
                frames.append(_frame(part))
        key = (pid, thread)
        samples = threads.setdefault(key, ThreadSamples(pid, command, thread))
        samples.stacks[tuple(frames)] += int(counted.group(2))
    return list(threads.values())


_LIBRARY_ROOT = re.compile(r"^.*?/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")


def _short_file(path: str) -> str:
    """speedscope's full file name as raw's short one: package-relative for libraries and the standard library,
    the file's name for a script (py-spy shortens the same way in raw output)."""
    if not path.startswith("/"):
        return path
    library = _LIBRARY_ROOT.sub("", path)
    return library if library != path else path.rsplit("/", 1)[-1]


_PROFILE_NAME = re.compile(r'^(?:Process (\d+) )?Thread (\w+)(?: "(.*)")?$')


def read_speedscope(document: Any, max_stacks: int) -> list[ThreadSamples]:
    """speedscope JSON as py-spy writes it."""
    if not isinstance(document, dict):
        raise ValueError("not a speedscope document")
    shared = document.get("shared")
    raw_frames = shared.get("frames") if isinstance(shared, dict) else None
    if not isinstance(raw_frames, list):
        raise ValueError("no shared frames")
    frames = [Frame(str(f.get("name", "?")), _short_file(str(f.get("file") or "")),
                    f.get("line") if isinstance(f.get("line"), int) else None) if isinstance(f, dict)
              else Frame("?", "", None) for f in raw_frames[:1_000_000]]
    threads: list[ThreadSamples] = []
    read = 0
    for profile in document.get("profiles") or []:
        if not isinstance(profile, dict) or not isinstance(profile.get("samples"), list):
            continue
        named = _PROFILE_NAME.match(str(profile.get("name", "")))
        pid = int(named.group(1)) if named and named.group(1) else None
        # py-spy could not always read the thread's name ('Thread 0x1EE0B85C0 ""', older py-spy and macOS): unknown,
        # like raw output without --threads, which the main thread may be.
        samples = ThreadSamples(pid, "", named.group(3) if named and named.group(3) else "?")
        for sample in profile["samples"]:
            if read >= max_stacks:
                break
            read += 1
            if isinstance(sample, list):
                stack = tuple(frames[i] for i in sample[:512] if isinstance(i, int) and 0 <= i < len(frames))
                stack = tuple(f for f in stack if not f.function.startswith(("process ", "thread (")))
                samples.stacks[stack] += 1
        threads.append(samples)
    return threads


def parse_record(text: str, max_stacks: int) -> list[ThreadSamples]:
    """Either format, told from the content."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return read_speedscope(json.loads(stripped), max_stacks)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid speedscope JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise ValueError("speedscope JSON nested too deep to be py-spy's") from exc
    return read_raw(text, max_stacks)
