"""Loading pickles that come from other machines (flight-recorder dumps, allocator snapshots) safely.

A pickle can name any importable callable and call it while loading; that is code execution. The dumps we
read hold only dicts, lists, tuples, strings, bytes, numbers, booleans and None, all of which pickle encodes
with plain opcodes that never look up a global. So this unpickler refuses every global lookup (which is also
how REDUCE, BUILD, NEWOBJ and the copyreg extension codes get their callables) and every persistent id: a
file that needs either is refused before anything in it runs.

Memory: C's unpickler keeps its memo in an array sized by the largest index it is given, so one LONG_BINPUT with a
corrupt or crafted 4-byte index makes it allocate gigabytes (found by benchmarks/fuzz.py: 12 GB from a 3 KB
flight-recorder dump). Pickles up to PICKLE_PURE_MAX_BYTES (every flight-recorder dump, most allocator snapshots)
are read by Python's own unpickler, whose memo is a dict; larger ones need C's speed and are read by it.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

from tools.core.errors import UnreadableInput
from tools.core.limits import PICKLE_PURE_MAX_BYTES

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


def load_plain_pickle(data: bytes, what: str) -> Any:
    """Unpickle `data` allowing only plain containers and scalars; UnreadableInput otherwise."""
    unpickler = _PurePlainUnpickler if len(data) <= PICKLE_PURE_MAX_BYTES else _FastPlainUnpickler
    try:
        return unpickler(io.BytesIO(data)).load()
    except UnsafePickle:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, RecursionError, UnicodeDecodeError, OverflowError, struct.error) as exc:
        raise UnreadableInput(f"{what} is not a readable pickle ({type(exc).__name__}: {str(exc)[:120]}).",
                              "Check that the file is complete (a dump cut short by a killed job cannot be read).") \
            from exc
