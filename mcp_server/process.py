"""Process-wide settings the CLI and the server apply once at start."""

from __future__ import annotations

import ctypes
import ctypes.util

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
_MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial value, kept fixed


def return_freed_memory() -> None:
    """Serve every large allocation from its own mapping, so that freeing it gives the memory back at once.

    glibc raises its mmap threshold each time a mapped block is freed (up to 32 MiB), after which blocks of
    that size come from the heap and stay in the process when freed. A trace summary makes and frees numpy
    arrays of tens of MB per rank: with the moving threshold the second rank of an Nsight Systems export ran
    on top of the first one's freed arrays (peak RSS 277 -> 250 MiB on a 1 GB export with the threshold fixed),
    and a long-running server kept the peak of its largest call. Elsewhere than glibc this does nothing."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl, macOS: no mallopt
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
