"""Server and CLI settings: roots, byte budget, wall-clock limit. One parser for both entry points.

Each flag has an environment variable, because MCP clients launch servers with `env` blocks:
GPU_TRIAGE_ROOTS (os.pathsep-separated), GPU_TRIAGE_MAX_BYTES, GPU_TRIAGE_TIMEOUT_S, and for multi-node calls
GPU_TRIAGE_REMOTE_PYTHON (the interpreter with gpu-triage-mcp installed on the job's nodes; default this one, which
suits a shared filesystem) and GPU_TRIAGE_SSH_CONFIG (an ssh_config file for the SSH backend). These two are the
operator's, never a caller's: a tool call cannot choose what runs on the nodes.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.core.errors import BadInput
from tools.core.limits import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_MAX_BYTES,
    MAX_CALL_TIMEOUT_S,
    MAX_MAX_BYTES,
    MIN_CALL_TIMEOUT_S,
    MIN_MAX_BYTES,
)
from tools.core.paths import normalise_roots

__all__ = ["Settings", "add_settings_arguments", "settings_from_args"]


@dataclass(frozen=True)
class Settings:
    roots: tuple[Path, ...]
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    remote_python: str = sys.executable
    ssh_config: Path | None = None
    # The CLI's working directory: a path in a result that lies under no root but under it is shown relative to it
    # (mcp_server/shown_paths.py), as a shell means a relative path. None in the server.
    cwd: Path | None = None


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
    nodes = parser.add_argument_group("multi-node calls (--slurm-job, --hosts)")
    nodes.add_argument("--remote-python", metavar="PATH", default=None,
                       help="Interpreter with gpu-triage-mcp installed on the job's nodes (default: "
                       "$GPU_TRIAGE_REMOTE_PYTHON, else this one, as on a shared filesystem).")
    nodes.add_argument("--ssh-config", metavar="FILE", default=None,
                       help="ssh_config file for the SSH backend (default: $GPU_TRIAGE_SSH_CONFIG, else ssh's own).")


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
    remote_python = args.remote_python or os.environ.get("GPU_TRIAGE_REMOTE_PYTHON") or sys.executable
    if not os.path.isabs(remote_python):
        raise BadInput(f"--remote-python {remote_python!r} is not an absolute path.",
                       "Give the interpreter's full path as it exists on the nodes.")
    ssh_config_raw = args.ssh_config or os.environ.get("GPU_TRIAGE_SSH_CONFIG")
    ssh_config = Path(ssh_config_raw).resolve() if ssh_config_raw else None
    if ssh_config is not None and not ssh_config.is_file():
        raise BadInput(f"--ssh-config {ssh_config_raw!r} is not a file.", "Give an existing ssh_config file.")
    return Settings(roots=normalise_roots(roots_raw), max_bytes=max_bytes, timeout_s=timeout,
                    remote_python=remote_python, ssh_config=ssh_config)
