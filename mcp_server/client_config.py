"""`gpu-triage-mcp --print-config CLIENT`: the registration of this install for an MCP client, with absolute
paths filled in (clients start servers from their own working directory with a small PATH)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CLIENTS", "client_config"]

CLIENTS = ("claude-code", "codex", "claude-desktop")
_NAME = "gpu-triage"


def _launch() -> list[str]:
    """This install's server command: its console script beside the interpreter, else the module."""
    script = Path(sys.executable).with_name("gpu-triage-mcp")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "mcp_server"]


def client_config(client: str, roots: Sequence[str]) -> str:
    command = _launch()
    env = {"GPU_TRIAGE_ROOTS": os.pathsep.join(str(Path(r).expanduser().resolve()) for r in roots)} if roots else {}
    if client == "claude-code":
        flags = " ".join(f"--env {shlex.quote(f'{k}={v}')}" for k, v in env.items())
        entry = {"mcpServers": {_NAME: {"type": "stdio", "command": command[0], "args": command[1:], "env": env}}}
        return (f"claude mcp add --transport stdio {flags + ' ' if flags else ''}{_NAME} -- "
                f"{' '.join(map(shlex.quote, command))}\n\n# or, in the project's .mcp.json:\n"
                + json.dumps(entry, indent=2) + "\n")
    if client == "codex":
        lines = [f"[mcp_servers.{_NAME}]", f"command = {json.dumps(command[0])}", f"args = {json.dumps(command[1:])}",
                 "tool_timeout_sec = 90  # above the server's own 60 s limit: its clearer error arrives first"]
        if env:
            lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
        return "# in ~/.codex/config.toml\n" + "\n".join(lines) + "\n"
    entry = {"mcpServers": {_NAME: {"command": command[0], "args": command[1:], "env": env}}}
    return ("# in claude_desktop_config.json (quit Claude Desktop fully before editing)\n"
            + json.dumps(entry, indent=2) + "\n")
