"""The one thing this project writes outside what the caller asked for: compiled pattern automata, kept so the next
process does not compile them again.

Compiling diagnose_logs' rule set for Hyperscan takes about 0.35 s, a third of what ripgrep needs for a whole 1 GiB
log, and every CLI call (and every server start) paid it. The compiled database is a few hundred KiB: it is stored
under `$XDG_CACHE_HOME/gpu-triage-mcp/` (else `~/.cache/gpu-triage-mcp/`) by the digest of everything it depends on
(the patterns, their flags, the Hyperscan version, the machine), with its own SHA-256 in front so a torn or altered
file is ignored. Nothing else is written; `GPU_TRIAGE_NO_CACHE=1` turns it off; any error reading or writing it
just means compiling again.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from tools.core.errors import TriageError
from tools.core.files import read_regular

__all__ = ["cache_key", "load_compiled", "store_compiled"]

_KEEP = 16  # compiled sets kept; the oldest go (a rule edit makes a new one)
_DIGEST = 32
_MAX_BYTES = 64 * 2**20  # a compiled rule set is ~300 KiB; a bigger file is not one of ours


def _folder() -> Path | None:
    if os.environ.get("GPU_TRIAGE_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-triage-mcp"


def cache_key(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def load_compiled(key: str) -> bytes | None:
    """The bytes stored under `key`, when they are there whole."""
    folder = _folder()
    if folder is None:
        return None
    try:
        # Opened like a caller's file: a FIFO or a device planted there is refused, never waited on.
        data = read_regular(folder / f"{key}.bin", _MAX_BYTES + 1)
    except (OSError, TriageError):
        return None
    if len(data) > _MAX_BYTES:
        return None
    body = data[_DIGEST:]
    return body if data[:_DIGEST] == hashlib.sha256(body).digest() else None


def store_compiled(key: str, body: bytes) -> None:
    """Keep `body` under `key` (written whole or not at all); the oldest sets beyond _KEEP are removed."""
    folder = _folder()
    if folder is None:
        return
    temporary: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(hashlib.sha256(body).digest() + body)
        os.replace(temporary, folder / f"{key}.bin")
        temporary = None
        kept = sorted(folder.glob("*.bin"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[_KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
