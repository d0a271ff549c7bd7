"""Starting the server as a person does: by hand on a terminal, over HTTP, and registering it with --print-config
(the settings it was given carried into the printed env; a missing root refused before anything is printed)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, base_env


def _first_stderr_line(argv: list[str], stdin: int | None = None) -> str:
    """The server's first line on stderr, read within 30 s; the server is stopped after."""
    server = subprocess.Popen([sys.executable, "-m", "mcp_server", *argv], cwd=REPO, env=base_env(), stdin=stdin,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        ready, _, _ = select.select([server.stderr], [], [], 30)
        return server.stderr.readline().strip() if ready else ""
    finally:
        server.terminate()
        server.wait(10)
        if server.stderr is not None:
            server.stderr.close()


def test_the_stdio_server_says_what_it_waits_for_on_a_terminal() -> None:
    leader, follower = os.openpty()
    try:
        line = _first_stderr_line([], stdin=follower)
    finally:
        os.close(leader)
        os.close(follower)
    assert line == "gpu-triage-mcp: waiting for an MCP client on stdin; see --help"


def test_http_mode_prints_its_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = _first_stderr_line(["--http", str(port)], stdin=subprocess.DEVNULL)
    assert line == f"gpu-triage-mcp: serving MCP (streamable HTTP) at http://127.0.0.1:{port}/mcp"


def _print_config(client: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcp_server", "--print-config", client, *args], cwd=REPO,
                          env=base_env(**env), capture_output=True, text=True, timeout=60)


def test_print_config_carries_the_settings_and_checks_the_roots(tmp_path: Path) -> None:
    one, two = tmp_path / "job", tmp_path / "baseline"
    one.mkdir()
    two.mkdir()
    desktop = _print_config("claude-desktop", "--timeout", "120", "--max-bytes", "16384",
                            GPU_TRIAGE_ROOTS=f"{one}:{two}")
    assert desktop.returncode == 0, desktop.stderr
    entry = json.loads(desktop.stdout.split("\n", 1)[1])["mcpServers"]["gpu-triage"]
    assert entry["env"] == {"GPU_TRIAGE_ROOTS": f"{one}:{two}", "GPU_TRIAGE_TIMEOUT_S": "120",
                            "GPU_TRIAGE_MAX_BYTES": "16384"}
    assert Path(entry["command"]).is_absolute() and "uv" not in Path(entry["command"]).parts
    codex = _print_config("codex", "--root", str(one), GPU_TRIAGE_TIMEOUT_S="30").stdout
    assert f'env = {{ GPU_TRIAGE_ROOTS = "{one}", GPU_TRIAGE_TIMEOUT_S = "30" }}' in codex, codex
    assert "startup_timeout_sec = 20\ntool_timeout_sec = 60 " in codex
    for bad, message in ((["--root", str(tmp_path / "gone")], f"root '{tmp_path / 'gone'}' is not an existing "
                          "directory"), (["--root", str(one), "--max-bytes", "10"], "--max-bytes 10 is out of range")):
        refused = _print_config("claude-code", *bad)
        assert refused.returncode == 3 and refused.stdout == "" and message in refused.stderr, refused.stderr
