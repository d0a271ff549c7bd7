"""`gpu-triage-mcp --print-config CLIENT`: the registration of this install for an MCP client, with absolute
paths filled in (clients start servers from their own working directory with a small PATH), in the shapes of the
README's snippets.

What it prints must keep working after it is pasted: every root is checked to exist (a missing one would stop the
server at its first start), the settings given (--root / GPU_TRIAGE_ROOTS, --timeout, --max-bytes) are carried
into its `env`, and an install that lives in uv's cache (`uvx --from SOURCE gpu-triage-mcp`) is registered as that
uvx line, not as a path into the cache that `uv cache prune` removes. pipx and venv installs: the absolute binary.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from tools.core.errors import BadInput
from tools.core.limits import DEFAULT_CALL_TIMEOUT_S

__all__ = ["CLIENTS", "checked_roots", "client_config", "launch_command"]

CLIENTS = ("claude-code", "codex", "claude-desktop")
_NAME = "gpu-triage"
_DIST = "gpu-triage-mcp"
_TOOL_TIMEOUT_MARGIN_S = 30  # Codex's tool_timeout_sec above the server's own limit, so its clearer error comes first
_STARTUP_TIMEOUT_S = 20  # Codex's startup_timeout_sec: a cold uvx start builds the environment first


def _uv_cache() -> Path:
    """uv's cache folder, as uv finds it (UV_CACHE_DIR, else the XDG cache)."""
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"]).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(xdg).expanduser() / "uv").resolve()


def _uvx_source() -> str | None:
    """What `uvx --from` was given, when this interpreter is one of uvx's environments in uv's cache: the source
    recorded by the installer (PEP 610 direct_url.json: a folder, a git URL at its revision, a wheel), else the
    release from the index."""
    if not Path(sys.prefix).resolve().is_relative_to(_uv_cache()):
        return None
    try:
        dist = metadata.distribution(_DIST)
    except metadata.PackageNotFoundError:
        return None
    direct = json.loads(dist.read_text("direct_url.json") or "null")
    if not isinstance(direct, dict) or "url" not in direct:
        return f"{_DIST}=={dist.version}"
    url = str(direct["url"])
    vcs = direct.get("vcs_info")
    if isinstance(vcs, dict):
        revision = vcs.get("requested_revision") or vcs.get("commit_id")
        return f"{vcs.get('vcs', 'git')}+{url}" + (f"@{revision}" if revision else "")
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else url


def launch_command() -> list[str]:
    """This install's server command: the uvx line for an install in uv's cache, else its console script beside
    the interpreter (a pipx or venv install), else the module."""
    source = _uvx_source()
    if source is not None:
        # uv tells the programs it runs where it is (UV); its uvx sits beside it. A client's PATH may lack both.
        beside_uv = Path(os.environ["UV"]).with_name("uvx") if os.environ.get("UV") else None
        uvx = str(beside_uv) if beside_uv is not None and beside_uv.is_file() else shutil.which("uvx") or "uvx"
        return [uvx, "--from", source, _DIST]
    script = Path(sys.executable).with_name(_DIST)
    return [str(script)] if script.is_file() else [sys.executable, "-m", "mcp_server"]


def checked_roots(roots: Sequence[str]) -> list[str]:
    """The roots resolved, each an existing folder, else BadInput naming the missing one."""
    resolved = []
    for raw in roots:
        root = Path(raw).expanduser().resolve()
        if not root.is_dir():
            raise BadInput(f"root {raw!r} is not an existing directory ({root}); the server would refuse to start.",
                           "Pass --root with a folder that exists on the machine the client starts the server on.")
        resolved.append(str(root))
    return resolved


def client_config(client: str, roots: Sequence[str], timeout_s: float | None = None,
                  max_bytes: int | None = None) -> str:
    """The registration for `client`; `roots` (each must exist), `timeout_s` and `max_bytes` go into its env."""
    command = launch_command()
    env: dict[str, str] = {}
    if roots:
        env["GPU_TRIAGE_ROOTS"] = os.pathsep.join(checked_roots(roots))
    if timeout_s is not None:
        env["GPU_TRIAGE_TIMEOUT_S"] = f"{timeout_s:g}"
    if max_bytes is not None:
        env["GPU_TRIAGE_MAX_BYTES"] = str(max_bytes)
    if client == "claude-code":
        flags = " ".join(f"--env {shlex.quote(f'{k}={v}')}" for k, v in env.items())
        entry = {"mcpServers": {_NAME: {"type": "stdio", "command": command[0], "args": command[1:], "env": env}}}
        return (f"claude mcp add --transport stdio {flags + ' ' if flags else ''}{_NAME} -- "
                f"{' '.join(map(shlex.quote, command))}\n\n# or, in the project's .mcp.json:\n"
                + json.dumps(entry, indent=2) + "\n")
    if client == "codex":
        limit = timeout_s if timeout_s is not None else DEFAULT_CALL_TIMEOUT_S
        lines = [f"[mcp_servers.{_NAME}]", f"command = {json.dumps(command[0])}", f"args = {json.dumps(command[1:])}"]
        if env:
            lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
        lines += [f"startup_timeout_sec = {_STARTUP_TIMEOUT_S}",
                  f"tool_timeout_sec = {limit + _TOOL_TIMEOUT_MARGIN_S:g}    # above the server's own per-call limit "
                  f"({limit:g} s), so the server's clearer error arrives first"]
        return "# in ~/.codex/config.toml\n" + "\n".join(lines) + "\n"
    entry = {"mcpServers": {_NAME: {"command": command[0], "args": command[1:], "env": env}}}
    return ("# in claude_desktop_config.json (quit Claude Desktop fully before editing)\n"
            + json.dumps(entry, indent=2) + "\n")
