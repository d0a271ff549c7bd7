"""Server and CLI settings: roots, byte budget, wall-clock limit. One parser for both entry points.

Each flag has an environment variable, because MCP clients launch servers with `env` blocks:
GPU_TRIAGE_ROOTS (os.pathsep-separated), GPU_TRIAGE_MAX_BYTES, GPU_TRIAGE_TIMEOUT_S.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from tools._paths import normalise_roots
from tools.errors import BadInput
from tools.limits import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_MAX_BYTES,
    MAX_CALL_TIMEOUT_S,
    MAX_MAX_BYTES,
    MIN_CALL_TIMEOUT_S,
    MIN_MAX_BYTES,
)

__all__ = ["Settings", "add_settings_arguments", "settings_from_args"]


@dataclass(frozen=True)
class Settings:
    roots: tuple[Path, ...]
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("limits and file access")
    group.add_argument("--root", action="append", metavar="DIR", default=None,
                       help="Directory the tools may read (repeatable). Default: $GPU_TRIAGE_ROOTS, else the "
                       "working directory.")
    group.add_argument("--max-bytes", type=int, metavar="N", default=None,
                       help=f"Byte budget of one response's text ({MIN_MAX_BYTES}-{MAX_MAX_BYTES}; "
                       f"default {DEFAULT_MAX_BYTES}).")
    group.add_argument("--timeout", type=float, metavar="SECONDS", default=None,
                       help=f"Wall-clock limit of one call, children included ({MIN_CALL_TIMEOUT_S:g}-"
                       f"{MAX_CALL_TIMEOUT_S:g}; default {DEFAULT_CALL_TIMEOUT_S:g}).")


def _from_env(name: str, cast: type[int] | type[float]) -> int | float | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return cast(raw)
    except ValueError as exc:
        raise BadInput(f"{name}={raw!r} is not a number.") from exc


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Build Settings from parsed flags, falling back to the environment, then to the defaults."""
    roots_raw: list[str] = args.root or [
        r for r in os.environ.get("GPU_TRIAGE_ROOTS", "").split(os.pathsep) if r
    ] or [os.getcwd()]
    max_bytes = args.max_bytes if args.max_bytes is not None else _from_env("GPU_TRIAGE_MAX_BYTES", int)
    timeout = args.timeout if args.timeout is not None else _from_env("GPU_TRIAGE_TIMEOUT_S", float)
    max_bytes = int(max_bytes) if max_bytes is not None else DEFAULT_MAX_BYTES
    timeout = float(timeout) if timeout is not None else DEFAULT_CALL_TIMEOUT_S
    if not MIN_MAX_BYTES <= max_bytes <= MAX_MAX_BYTES:
        raise BadInput(f"--max-bytes {max_bytes} is out of range.", f"Use {MIN_MAX_BYTES} to {MAX_MAX_BYTES}.")
    if not MIN_CALL_TIMEOUT_S <= timeout <= MAX_CALL_TIMEOUT_S:
        raise BadInput(f"--timeout {timeout:g} is out of range.",
                       f"Use {MIN_CALL_TIMEOUT_S:g} to {MAX_CALL_TIMEOUT_S:g} seconds.")
    return Settings(roots=normalise_roots(roots_raw), max_bytes=max_bytes, timeout_s=timeout)
