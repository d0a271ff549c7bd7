"""A file system that stops answering, as a hung NFS or Lustre mount does: a real FUSE mount (tests/lab/stalled_fs.py)
whose reads, or whose lookups, block in the kernel until the test lets them go.

The call still ends at its deadline, from the CLI and over MCP, and says which path and which mount; the server goes
on answering the other tools, and later calls on the same mount are refused at once instead of each leaving one more
thread blocked there.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil
import pytest

from tests.helpers import DATA, REPO, base_env, stdio_client
from tools.core.stalls import on_local_disk

LAB = REPO / "tests" / "lab" / "stalled_fs.py"


class StalledMount:
    def __init__(self, point: Path, release: Path) -> None:
        self.point, self.release_file = point, release

    def release(self) -> None:
        self.release_file.touch()


def _mounted(point: Path) -> bool:
    return any(line.split()[4] == str(point) for line in Path("/proc/self/mountinfo").read_text().splitlines())


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[StalledMount]:
    point, release = tmp_path / "mnt", tmp_path / "release"
    point.mkdir()
    daemon = subprocess.Popen([sys.executable, str(LAB), str(point), str(release)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    until = time.monotonic() + 15
    while not _mounted(point):
        if daemon.poll() is not None or time.monotonic() > until:
            raise RuntimeError(f"the FUSE lab did not mount: {daemon.stderr.read().decode() if daemon.stderr else ''}")
        time.sleep(0.05)
    mount = StalledMount(point, release)
    try:
        yield mount
    finally:
        mount.release()
        time.sleep(0.2)
        subprocess.run(["fusermount3", "-u", "-z", str(point)], check=False, capture_output=True)
        daemon.kill()
        daemon.communicate(timeout=10)


def _cli(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "mcp_server.cli", *args], env=base_env(), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _first_stderr_line(process: subprocess.Popen[str], within_s: float) -> tuple[str, float]:
    """The first line the CLI writes to stderr and when (the process itself may stay blocked in the kernel)."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(process.stderr.readline() if process.stderr else ""),
                              daemon=True)
    started = time.monotonic()
    reader.start()
    reader.join(within_s)
    return (got[0] if got else ""), time.monotonic() - started


@pytest.mark.parametrize(("path", "syscall"), [("stalled/rank0.log", "read()"), ("hung/rank0.log", "stat")])
def test_the_cli_ends_at_its_deadline_and_names_the_stalled_path(stalled: StalledMount, tmp_path: Path, path: str,
                                                                  syscall: str) -> None:
    target = stalled.point / path
    cli = _cli(["grep-logs", str(target), "--root", str(stalled.point), "--timeout", "2"], cwd=tmp_path)
    said, after_s = _first_stderr_line(cli, within_s=15)
    # 2 s of deadline and the interpreter's start: no grace is waited out for a thread the kernel holds.
    assert after_s < 8, after_s
    assert f"{syscall}" in said and str(target) in said, said
    assert f"the file system at {stalled.point} (fuse) stalled" in said, said
    stalled.release()  # the blocked thread returns (EIO) and the process, already finished, can be reaped
    cli.communicate(timeout=15)
    assert cli.returncode == 3


def _server_threads(point: Path) -> int:
    """Threads of this test's server (the one serving `point`; other tests' servers may still be exiting)."""
    servers = [p for p in psutil.Process().children(recursive=True)
               if "mcp_server" in (line := " ".join(p.cmdline())) and str(point) in line]
    assert len(servers) == 1, servers
    return servers[0].num_threads()


@pytest.mark.anyio
async def test_the_server_refuses_the_stalled_mount_at_once_and_serves_the_rest(stalled: StalledMount) -> None:
    healthy = DATA / "logs" / "public"
    blocked = stalled.point / "stalled"
    roots = ["--root", str(stalled.point), "--root", str(healthy)]
    async with stdio_client(base_env(), *roots, "--timeout", "2") as client:
        started = time.monotonic()
        first = await client.call_tool("grep_logs", {"paths": [str(blocked / "rank0.log")]})
        assert first.is_error and time.monotonic() - started < 8
        assert f"a read() on {blocked / 'rank0.log'} has not returned" in first.content[0].text
        threads = _server_threads(stalled.point)

        calls = [
            ("grep_logs", {"paths": [str(blocked / "rank1.log")]}),
            ("diagnose_logs", {"paths": [str(stalled.point / "stalled" / "*.log")]}),
            ("summarize_trace", {"path": str(stalled.point / "hung" / "trace.json")}),
            ("find_stragglers", {"logs": [str(blocked / "rank0.log"), str(blocked / "rank1.log")]}),
        ]
        slowest = 0.0
        for i in range(100):
            name, arguments = calls[i % len(calls)]
            began = time.monotonic()
            refused = await client.call_tool(name, arguments)
            slowest = max(slowest, time.monotonic() - began)
            assert refused.is_error, (name, refused.content[0].text)
            assert f"the file system at {stalled.point} (fuse) stalled" in refused.content[0].text, refused.content
            if i % 10 == 0:  # the other tools, on the other root, are answered all along
                began = time.monotonic()
                other = await client.call_tool("grep_logs", {"paths": [str(healthy / "*.log")], "preset": "nccl"})
                assert other.is_error is False, other.content[0].text
                slowest = max(slowest, time.monotonic() - began)
        assert slowest < 1.0, slowest
        assert _server_threads(stalled.point) <= threads + 2, "a refused call left a thread behind"

        stalled.release()
        await anyio.sleep(0.5)
        after = await client.call_tool("grep_logs", {"paths": [str(blocked / "rank1.log")]})
        # The mount answers again (with EIO, as the lab fails what it had blocked): tried, no longer refused as
        # stalled; the one file it was given could not be read, which is said as such (exit 3 on the CLI).
        text = after.content[0].text
        assert "(fuse) stalled" not in text and "Input/output error" in text, text


def test_logs_on_a_mount_that_can_stall_stay_on_the_watched_threads(stalled: StalledMount, tmp_path: Path) -> None:
    # diagnose_logs hands big inputs to a worker process only on local disks: a read stuck there would be out of the
    # stalled-mount watch's sight, so a FUSE (or NFS, Lustre) path keeps to this process's threads.
    local = tmp_path / "rank0.log"
    local.write_text("step 1\n")
    assert on_local_disk(local)  # pytest's tmp_path: the root file system or a tmpfs
    assert not on_local_disk(stalled.point / "stalled" / "rank0.log")

