"""File-system calls that never return, and the mounts they stalled.

A stalled NFS, Lustre or FUSE mount blocks stat, open and read in the kernel, and no signal frees the thread. The
contract runs each call so that it still ends at its deadline (mcp_server/contract.py); this module says why, and
keeps the server from leaving one more blocked thread behind on every later call:

- `touching(path)` and `opened(path, handle)` note which path a thread is in, for which call, since when;
- when a call is stopped at its deadline, `stuck_accesses(call)` finds its threads still blocked in a file-system
  system call (read from /proc/self/task/<tid>/syscall, so a thread that is merely slow in Python is not taken
  for one), and marks the mount under each path stalled;
- `refuse_if_stalled(path)` refuses at once any later path on a stalled mount; the mark goes when the blocked
  call returns.
"""

from __future__ import annotations

import itertools
import os
import platform
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tools.core.errors import UnreadableInput

__all__ = ["Access", "CALL_ID", "blocked", "new_call_id", "on_local_disk", "opened", "refuse_if_stalled",
           "stalled_accesses", "stuck_accesses", "touching"]

# The tool call a thread works for: set by the contract, copied into the threads a call starts (anyio copies it).
CALL_ID: ContextVar[int | None] = ContextVar("gpu_triage_call_id", default=None)
_call_ids = itertools.count(1)

# System calls that read the file system, by number (`man syscall`; /proc shows numbers, not names).
_FILE_SYSCALLS: dict[str, dict[int, str]] = {
    "x86_64": {0: "read", 2: "open", 4: "stat", 5: "fstat", 6: "lstat", 17: "pread64", 19: "readv", 21: "access",
               78: "getdents", 89: "readlink", 217: "getdents64", 257: "openat", 262: "newfstatat",
               267: "readlinkat", 269: "faccessat", 295: "preadv", 332: "statx", 437: "openat2",
               439: "faccessat2"},
    "aarch64": {48: "faccessat", 56: "openat", 61: "getdents64", 63: "read", 65: "readv", 67: "pread64",
                69: "preadv", 78: "readlinkat", 79: "newfstatat", 80: "fstat", 291: "statx", 437: "openat2",
                439: "faccessat2"},
}


@dataclass
class Access:
    """One thread inside the file system on a path: since when, for which call."""

    path: str
    call: int | None
    thread: int  # native thread id, as /proc/self/task names it
    since: float = field(default_factory=time.monotonic)
    active: Callable[[], bool] = lambda: True
    syscall: str | None = None  # set when found blocked
    mount: str | None = None  # the mount point it stalled (None: the path itself)
    fstype: str | None = None

    def covers(self, path: str) -> bool:
        scope = self.mount or self.path
        return path == scope or path.startswith(scope.rstrip("/") + "/")

    def describe(self) -> str:
        where = f"{self.mount} ({self.fstype})" if self.mount else self.path
        return (f"a {self.syscall or 'file-system'}() on {self.path} has not returned for "
                f"{time.monotonic() - self.since:.0f} s: the file system at {where} stalled")


_lock = threading.Lock()
_accesses: dict[int, Access] = {}
_stalled: list[Access] = []
_keys = itertools.count(1)
_PRUNE_AT = 256  # open handles noted before the closed ones are forgotten


def new_call_id() -> int:
    return next(_call_ids)


def _register(access: Access) -> int:
    key = next(_keys)
    with _lock:
        _accesses[key] = access
    return key


def _absolute(path: Path | str) -> str:
    return os.path.normpath(os.path.abspath(path))


@contextmanager
def touching(path: Path | str) -> Iterator[None]:
    """Note that this thread is in the file system on `path` (a stat, a resolve, a directory listing)."""
    key = _register(Access(_absolute(path), CALL_ID.get(), threading.get_native_id()))
    try:
        yield
    finally:
        with _lock:
            _accesses.pop(key, None)


def opened(path: Path | str, handle: IO[bytes]) -> None:
    """Note `handle` as a read in progress on `path` until it is closed."""
    alive = weakref.ref(handle)

    def active() -> bool:
        current = alive()
        return current is not None and not current.closed

    _register(Access(_absolute(path), CALL_ID.get(), threading.get_native_id(), active=active))
    if len(_accesses) > _PRUNE_AT:
        with _lock:
            _prune()


def _prune() -> None:
    """Forget closed handles and stalls whose call returned (callers hold _lock)."""
    for key in [k for k, a in _accesses.items() if not a.active()]:
        del _accesses[key]
    live = set(map(id, _accesses.values()))
    _stalled[:] = [a for a in _stalled if id(a) in live]



def _blocked_in(thread: int) -> str | None:
    """The file-system system call `thread` is blocked in, if any."""
    try:
        first = Path(f"/proc/self/task/{thread}/syscall").read_text().split(maxsplit=1)[0]
    except (OSError, IndexError):
        return None
    if not first.lstrip("-").isdigit():
        return None  # "running", or "-1" between system calls
    return _FILE_SYSCALLS.get(platform.machine(), {}).get(int(first))


def _mount_of(path: str) -> tuple[str, str] | None:
    """The mount point holding `path` and its type, from /proc/self/mountinfo (which never stalls); None for the
    root file system, so that one stuck path never stops reads everywhere."""
    best: tuple[str, str] | None = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5:
            continue
        point = parts[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        if point != "/" and (path == point or path.startswith(point.rstrip("/") + "/")):
            if best is None or len(point) > len(best[0]):
                best = (point, rest.split(maxsplit=1)[0] if rest else "?")
    return best


# File systems of a local block device or of memory: a read of them ends (or fails) on its own. Network and FUSE
# mounts (nfs, lustre, gpfs, cifs, fuse.*, beegfs, ...) can hang in the kernel: their reads must stay on this
# process's threads, where stuck_accesses can see them.
_LOCAL_FSTYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay",
                            "squashfs", "vfat", "exfat", "ntfs3", "iso9660", "erofs"})


def on_local_disk(path: Path | str) -> bool:
    """Whether `path` lies on a local file system (the root one, or a mount of a local type), from mountinfo alone."""
    mount = _mount_of(_absolute(path))
    return mount is None or mount[1] in _LOCAL_FSTYPES


def blocked(call: int) -> bool:
    """Whether a thread of `call` is blocked in a file-system call now (nothing is marked)."""
    with _lock:
        candidates = [a.thread for a in _accesses.values() if a.call == call and a.active()]
    return any(_blocked_in(thread) is not None for thread in candidates)


def stuck_accesses(call: int) -> list[Access]:
    """The accesses of `call` whose thread is still blocked in a file-system call; their mounts are marked
    stalled from now until they return."""
    stuck: list[Access] = []
    with _lock:
        _prune()
        for access in _accesses.values():
            if access.call != call or any(access is a for a in _stalled):
                continue
            syscall = _blocked_in(access.thread)
            if syscall is None:
                continue
            access.syscall = syscall
            mount = _mount_of(access.path)
            if mount is not None:
                access.mount, access.fstype = mount
            _stalled.append(access)
            stuck.append(access)
    return stuck


def stalled_accesses() -> list[Access]:
    """Every access still blocked on a stalled mount (checked at every call: nothing to do in the common case)."""
    if not _stalled:
        return []
    with _lock:
        _prune()
        return list(_stalled)


def refuse_if_stalled(path: Path | str) -> None:
    """Refuse `path` at once when it lies on a mount where an earlier call is still blocked."""
    if not _stalled:  # the common case, without the lock
        return
    target = _absolute(path)
    with _lock:
        _prune()
        blocking = next((a for a in _stalled if a.covers(target)), None)
    if blocking is not None:
        raise UnreadableInput(f"{target} was not read: {blocking.describe()}.",
                              "Check the mount (`mount`, `dmesg` for 'not responding'); paths there are read again "
                              "once that call returns.")
