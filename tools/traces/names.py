"""What runtime API names mean, whichever profiler wrote them: one place for the readers and the analysis.

Kineto names calls plainly (`cudaStreamSynchronize`); Nsight Systems adds a version suffix
(`cudaStreamSynchronize_v3020`) and records driver calls (`cuStreamSynchronize`) beside runtime ones.
"""

from __future__ import annotations

import re

__all__ = ["api_name", "is_sync_call"]

_VERSION = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
# Calls that block the host until the GPU is done: stream, device, event and context syncs (runtime, HIP and driver)
# and the synchronous copies (Async variants excluded).
_SYNC = re.compile(r"^(?:(?:cuda|hip)(?:Stream|Device|Event)Synchronize|cu(?:Stream|Ctx|Event)Synchronize|"
                   r"(?:cuda|hip)Memcpy(?:2D|DtoH|FromSymbol)?|cuMemcpy(?:DtoH|HtoD|DtoD)(?:_v2)?)$")


def api_name(raw: str) -> str:
    """The call's name without nsys's version suffix."""
    return _VERSION.sub("", raw)


def is_sync_call(name: str) -> bool:
    """Whether a runtime or driver call (as api_name gives it) makes the host wait for the GPU."""
    return _SYNC.match(name) is not None
