"""Loading pickles that come from other machines (flight-recorder dumps, allocator snapshots) safely.

A pickle can name any importable callable and call it while loading; that is code execution. The dumps we
read hold only dicts, lists, tuples, strings, bytes, numbers, booleans and None, all of which pickle encodes
with plain opcodes that never look up a global. So this unpickler refuses every global lookup (which is also
how REDUCE, BUILD, NEWOBJ and the copyreg extension codes get their callables) and every persistent id: a
file that needs either is refused before anything in it runs.

Memory: C's unpickler keeps its memo in an array sized by the largest index it is given, so one LONG_BINPUT with a
corrupt or crafted 4-byte index makes it allocate gigabytes (found by benchmarks/fuzz.py: 12 GB from a 3 KB
flight-recorder dump). Pickles up to PICKLE_PURE_MAX_BYTES (every flight-recorder dump, most allocator snapshots)
are read by Python's own unpickler, whose memo is a dict; larger ones need C's speed and are read by it in a
spawned child process whose address space is capped (RLIMIT_AS), so such an index fails there, not in the server.
The child hands back what it read as a pickle of plain values that it made itself.
"""

from __future__ import annotations

import io
import multiprocessing
import pickle
import resource
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from tools.core.errors import LimitExceeded, UnreadableInput
from tools.core.limits import PICKLE_CHILD_BYTES_PER_BYTE, PICKLE_CHILD_MEMORY_FLOOR, PICKLE_PURE_MAX_BYTES

__all__ = ["UnsafePickle", "load_plain_pickle"]


class UnsafePickle(UnreadableInput):
    """The pickle asks for something other than plain containers and scalars."""


class _Refusals:
    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickle(f"the pickle asks for {module}.{name}; only plain containers and scalars are accepted, "
                           "so it was refused without running anything.",
                           "Use a dump written by PyTorch itself; if it is, report the format change.")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickle("the pickle uses persistent ids (external objects); refused without running anything.",
                           "Use a dump written by PyTorch itself.")


class _PurePlainUnpickler(_Refusals, pickle._Unpickler):
    """Python's unpickler: its memo is a dict, so no index can make it allocate."""


class _FastPlainUnpickler(_Refusals, pickle.Unpickler):
    """C's unpickler, for pickles too large for Python's in the call's time."""


def _cap_memory(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _load_fast(data: bytes) -> Any:
    """In the child: C's unpickler, refusals included (an UnsafePickle comes back as itself)."""
    return _FastPlainUnpickler(io.BytesIO(data)).load()


def _load_in_child(data: bytes, what: str, deadline: float) -> Any:
    limit = PICKLE_CHILD_MEMORY_FLOOR + PICKLE_CHILD_BYTES_PER_BYTE * len(data)
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_cap_memory,
                               initargs=(limit,))
    try:
        return pool.submit(_load_fast, data).result(timeout=max(0.1, deadline - time.monotonic()))
    except FutureTimeout as exc:
        raise LimitExceeded(f"unpickling {what} ({len(data) / 2**20:.0f} MiB) did not finish within the call's limit.",
                            "Raise --timeout for a snapshot this large.") from exc
    except (MemoryError, BrokenProcessPool) as exc:
        raise UnreadableInput(f"{what} needs more than {limit / 2**30:.1f} GiB to unpickle ({len(data) / 2**20:.0f} "
                              "MiB of pickle): a corrupt or crafted memo index, or not a dump of plain values.",
                              "Check that the file is complete and is the dump PyTorch wrote.") from exc
    finally:
        for process in list(pool._processes.values()):  # a child still unpickling at the deadline is killed
            process.kill()
        pool.shutdown(wait=True, cancel_futures=True)


def load_plain_pickle(data: bytes, what: str, deadline: float) -> Any:
    """Unpickle `data` allowing only plain containers and scalars, by `deadline` (time.monotonic()); UnreadableInput
    otherwise."""
    try:
        if len(data) > PICKLE_PURE_MAX_BYTES:
            return _load_in_child(data, what, deadline)
        return _PurePlainUnpickler(io.BytesIO(data)).load()
    except UnreadableInput:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError, UnicodeDecodeError, OverflowError, struct.error) as exc:
        raise UnreadableInput(f"{what} is not a readable pickle ({type(exc).__name__}: {str(exc)[:120]}).",
                              "Check that the file is complete (a dump cut short by a killed job cannot be read).") \
            from exc
