"""A GPU OOM's size and device in every form the allocators print them (issue 31, round 8): which bytes were asked
for and on which GPU, whatever framework ran out.

- the request: `Tried to allocate 20.00 MiB` (PyTorch), `when allocating 1294336000 bytes` / `trying to allocate
  2.14GiB` (TensorFlow), `Cannot allocate 3.6GB memory` (Paddle), `could not allocate collective of size: N` (XLA),
  `failed to allocate 968.17M (1015196672 bytes)` (the byte count when both are printed);
- the GPU: `GPU 0`, `GPU_0_bfc` (TensorFlow's allocator's name), `device:GPU:0` (a TensorFlow node's device, on the
  line under the exception), `cuda:0`, `on device 0`.

Sizes are read 1024-based (GB is GiB, as the allocators mean it). Only facts: the category stays with the rules and
the taxonomy. Linear patterns on a few short lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["oom_facts"]

_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_SIZE = r"(?P<number>\d+(?:\.\d+)?) ?(?:(?P<unit>[KMGTP])i?B?\b|(?P<bytes>bytes?)\b)"
_REQUESTED = [re.compile(p, re.IGNORECASE) for p in (
    r"\((?P<number>\d+) (?P<bytes>bytes)\)",  # TF: failed to allocate 968.17M (1015196672 bytes)
    r"\b(?:tried to |trying to |when |could not |cannot |failed to |unable to )?allocat(?:e|ing) " + _SIZE,
    r"\ballocate \w+(?: \w+)? of size:? (?P<number>\d+)(?P<bytes>)",  # XLA: could not allocate collective of size: N
)]
_GPU = [re.compile(p) for p in (
    r"\bGPU[ _:]?(?P<gpu>\d+)\b(?!\.\d)",
    r"\bGPU_(?P<gpu>\d+)_bfc\b",
    r"\bcuda:(?P<gpu>\d+)\b",
    r"\bon device (?P<gpu>\d+)\b",
)]


def _bytes(found: re.Match[str]) -> int | None:
    number = float(found["number"])
    if found.groupdict().get("bytes") is not None:
        return int(number)
    unit = (found.groupdict().get("unit") or "").upper()
    if not unit:
        return None  # a bare number with no unit is no size
    return int(number * _UNIT[unit])


def oom_facts(facts: dict[str, object], texts: Iterable[str]) -> None:
    """Fill in `requested_bytes` and `gpu` of an OOM finding from its line (first of `texts`) and the lines under it;
    facts already there stay."""
    for text in texts:
        if "requested_bytes" not in facts:
            for pattern in _REQUESTED:
                found = pattern.search(text)
                size = _bytes(found) if found is not None else None
                if size is not None:
                    facts["requested_bytes"] = size
                    break
        if "gpu" not in facts:
            for pattern in _GPU:
                gpu = pattern.search(text)
                if gpu is not None:
                    facts["gpu"] = int(gpu["gpu"])
                    break
