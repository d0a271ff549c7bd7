"""The restricted unpickler against the payload families, through the two tools that read pickles
(analyze_flight_recorder, analyze_memory): REDUCE / INST / OBJ / NEWOBJ / BUILD with their callables reached through
GLOBAL or STACK_GLOBAL (protocols 0-5), an innocent-looking global, copyreg extension codes, persistent ids, memo
tricks (a list that holds itself), a length field of 2 GiB, and nesting 10^5 deep. Nothing may be imported or run
(a payload would create the marker file), every call ends with a result or a clear refusal, and memory stays
bounded."""

from __future__ import annotations

import os
import pickle
import resource
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.core.errors import TriageError
from tools.hangs import AnalyzeFlightRecorderInput, analyze_flight_recorder
from tools.memory import AnalyzeMemoryInput, analyze_memory


class _Payload:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def _payloads(marker: Path) -> dict[str, bytes]:
    touch = f"touch {marker}".encode()
    found = {f"reduce_protocol_{p}": pickle.dumps(_Payload(f"touch {marker}"), protocol=p) for p in range(6)}
    found.update({
        "global_reduce_text": b"cos\nsystem\n(S'" + touch + b"'\ntR.",
        "inst": b"(S'" + touch + b"'\nios\nsystem\n.",
        "obj": b"(cos\nsystem\nS'" + touch + b"'\no.",
        "newobj_build": b"\x80\x02cbuiltins\nobject\n)\x81}b.",
        "innocent_global": b"\x80\x02ccollections\nOrderedDict\n)R.",
        "stack_global": b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c" + bytes([len(touch)]) + touch + b"\x85R.",
        "extension_code": b"\x80\x02\x82\x01)R.",
        "persistent_id": b"\x80\x02X\x03\x00\x00\x00abcQ.",
        "memo_self_reference": b"\x80\x02]q\x00h\x00a.",
        "huge_length": b"\x80\x04X\xff\xff\xff\x7fabc.",
        "deep_nesting": b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b".",
        "truncated": pickle.dumps({"entries": [{"seq": 1}] * 10}, protocol=4)[:-7],
    })
    return found


@pytest.mark.parametrize("tool", ["flight_recorder", "memory"])
def test_no_payload_runs_and_every_one_ends_clearly(tmp_path: Path, tool: str) -> None:
    marker = tmp_path / "ran"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes: dict[str, str] = {}
    for name, data in _payloads(marker).items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "rank_0").write_bytes(data)
        context = ToolContext(roots=(tmp_path,), timeout_s=20)
        try:
            if tool == "flight_recorder":
                anyio.run(analyze_flight_recorder, AnalyzeFlightRecorderInput(path=str(folder)), context)
            else:
                anyio.run(analyze_memory, AnalyzeMemoryInput(path=str(folder / "rank_0")), context)
            outcomes[name] = "result"
        except TriageError as exc:
            outcomes[name] = exc.message
    assert not marker.exists()
    assert "os" not in sys.modules or sys.modules["os"].system is os.system  # nothing was patched either
    malicious = [n for n in outcomes if n.startswith(("reduce_protocol", "global_reduce", "inst", "obj", "stack_global",
                                                      "newobj", "innocent", "persistent"))]
    assert len(malicious) == 13 and all(outcomes[n] != "result" for n in malicious), outcomes
    # Binary pickles (protocol 2 and later, the dumps' own) are read as pickles and refused at their first global,
    # saying what they asked for; older text pickles are no allocator snapshot to the memory reader.
    for name in ("reduce_protocol_2", "reduce_protocol_5", "stack_global", "innocent_global"):
        assert "refused without running anything" in outcomes[name], (name, outcomes[name])
    assert "OrderedDict" in outcomes["innocent_global"] and "system" in outcomes["stack_global"]
    if tool == "flight_recorder":
        assert all("refused without running anything" in outcomes[n] or "not a readable pickle" in outcomes[n]
                   or "no flight-recorder" in outcomes[n] or "rank" in outcomes[n] for n in malicious), outcomes
    # Memory stays bounded: no 2 GiB allocation for the length field, no blow-up on the deep nesting.
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 300


def test_a_large_pickle_is_read_in_a_capped_child_and_a_crafted_memo_index_fails_there() -> None:
    import psutil

    from tools.core.errors import LimitExceeded, UnreadableInput
    from tools.core.limits import PICKLE_PURE_MAX_BYTES
    from tools.core.unpickle import load_plain_pickle

    big = {"segments": [{"address": i, "blocks": [f"{i:0200d}"]} for i in range(PICKLE_PURE_MAX_BYTES // 180)]}
    data = pickle.dumps(big, protocol=4)
    assert len(data) > PICKLE_PURE_MAX_BYTES
    started = time.monotonic()
    assert load_plain_pickle(data, "snapshot", time.monotonic() + 60) == big  # C's speed, in the child, same answer
    whole_s = time.monotonic() - started
    # A 33 MB string, then LONG_BINPUT at index 0xF0000000: C's memo array would take 2 x 2^32 x 8 bytes.
    text = b"y" * (PICKLE_PURE_MAX_BYTES + 1024)
    crafted = b"\x80\x04\x8e" + len(text).to_bytes(8, "little") + text + b"r\x00\x00\x00\xf0."
    before = psutil.Process().memory_info().rss
    with pytest.raises(UnreadableInput, match=r"needs more than .* GiB to unpickle .*crafted memo index"):
        load_plain_pickle(crafted, "snapshot", time.monotonic() + 60)
    assert psutil.Process().memory_info().rss - before < 512 * 2**20  # the blow-up stayed in the child
    # A child still unpickling at the call's deadline is killed, not left running.
    started = time.monotonic()
    with pytest.raises(LimitExceeded, match="did not finish within the call's limit"):
        load_plain_pickle(data, "snapshot", time.monotonic() + 0.05)
    assert time.monotonic() - started < whole_s / 2, (time.monotonic() - started, whole_s)  # not waited out
    workers = [c for c in psutil.Process().children() if "spawn_main" in " ".join(c.cmdline())]
    assert workers == []  # (multiprocessing's resource tracker stays: it is no worker)
