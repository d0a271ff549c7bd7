"""The only place that starts external programs.

Programs come from a fixed allow-list and run as argv lists (never through a shell), in a new
session so that the whole process group can be killed. Output is read up to a byte cap; the rest is
drained and dropped. When the call's deadline passes or the call is cancelled, the group is killed
and reaped before the error propagates, so no child outlives the tool call.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import ByteReceiveStream, Process

from tools.core.errors import BadInput, LimitExceeded, Unavailable
from tools.core.limits import CHILD_REAP_TIMEOUT_S, CHILD_TERM_GRACE_S, MAX_PROGRAM_OUTPUT_BYTES

__all__ = ["ALLOWED_PROGRAMS", "ProgramOutput", "find_program", "run_program"]

# Read-only diagnostics only. Adding a program here is a security decision: it must not change state.
# scontrol is run only with `show job` / `listpids`; srun and ssh only to start our own collector with fixed
# arguments on a job's nodes (tools/cluster/nodes.py), never with caller text.
# nsys only as `nsys export --type sqlite` of a report the caller named, into a private temporary folder that is
# deleted after the call (tools/traces/nsys.py): it reads the report and writes nothing else.
# ibstat (no arguments) and ethtool (an interface name this node's /sys/class/net lists, nothing else) only print
# the state of the node's ports (tools/interconnect/live.py). py-spy reads the pids it is given: `dump`
# (tools/hangs/stacks.py) and `record` for a bounded time into a private temporary file (tools/host/profile.py,
# which starts it itself to stop it with SIGINT, and sends every target SIGCONT after). ncu only as `ncu --import
# REPORT --csv --page raw|details` of a report the caller named, with its stock-file deployment off (it reads the
# report and prints; tools/kernels/ncu_report.py). c++filt (GNU binutils) only with mangled kernel names as its
# arguments: it prints them demangled and touches nothing (tools/kernels/names.py).
ALLOWED_PROGRAMS = frozenset({"nvidia-smi", "py-spy", "dmesg", "scontrol", "srun", "ssh", "nsys", "ibstat", "ethtool",
                              "ncu", "c++filt"})


@dataclass(frozen=True)
class ProgramOutput:
    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_cut_bytes: int
    timed_out: bool = False


def find_program(program: str, also_in: Sequence[str] = (), first_in: Sequence[str] = ()) -> str:
    """Absolute path of an allow-listed program in the folders `first_in` (a configured install, which wins), on
    PATH, then in the folders `also_in`, by the same name; or Unavailable."""
    if program not in ALLOWED_PROGRAMS:
        raise BadInput(f"program {program!r} is not on the allow-list.", f"Allowed: {sorted(ALLOWED_PROGRAMS)}.")
    path = next((found for folder in first_in if (found := shutil.which(program, path=folder))), None)
    # Then beside our own interpreter: py-spy is one of our dependencies, installed into the same environment,
    # and an MCP client often starts the server without that environment's bin folder on PATH.
    path = path or shutil.which(program) or shutil.which(program, path=sysconfig.get_path("scripts"))
    for folder in also_in:
        path = path or shutil.which(program, path=folder)
    if path is None:
        raise Unavailable(f"{program} not found on PATH.", "Install it or run this on a host that has it.")
    return path


async def _read_capped(stream: ByteReceiveStream | None, cap: int, sink: list[bytes]) -> int:
    """Append up to `cap` bytes of `stream` to `sink`; return how many more bytes were dropped."""
    if stream is None:
        return 0
    kept = dropped = 0
    async for chunk in stream:
        room = cap - kept
        if room > 0:
            sink.append(chunk[:room])
            kept += min(room, len(chunk))
        dropped += max(0, len(chunk) - max(room, 0))
    return dropped


def _signal_group(process: Process, signum: signal.Signals) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        process.send_signal(signum)


async def run_program(
    program: str,
    args: Sequence[str],
    *,
    timeout_s: float,
    max_output_bytes: int = MAX_PROGRAM_OUTPUT_BYTES,
    partial_on_timeout: bool = False,
    also_in: Sequence[str] = (),
    first_in: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ProgramOutput:
    """Run an allow-listed program with `args` and a hard wall-clock limit. With `partial_on_timeout`, a program
    still running at the limit is killed and what it wrote so far is returned (`timed_out`), instead of an error:
    a fan-out keeps the nodes that answered when one does not. `also_in`: folders to look in after PATH;
    `first_in`: before it (a configured install); `env`: variables set for the child over this process's
    environment."""
    argv = [find_program(program, also_in, first_in), *args]
    out: list[bytes] = []
    err: list[bytes] = []
    try:
        # stdin from /dev/null: on a stdio MCP server the inherited stdin is the JSON-RPC stream.
        process = await anyio.open_process(argv, start_new_session=True, stdin=subprocess.DEVNULL,
                                           env=None if env is None else {**os.environ, **env})
    except OSError as exc:
        raise Unavailable(f"{program} could not be started: {exc.strerror or exc}.") from exc
    cut = 0
    returncode = -9
    timed_out = False
    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as group:

                async def read_stdout() -> None:
                    nonlocal cut
                    cut = await _read_capped(process.stdout, max_output_bytes, out)

                group.start_soon(read_stdout)
                group.start_soon(_read_capped, process.stderr, 64 * 1024, err)
            returncode = await process.wait()
    except TimeoutError as exc:
        if partial_on_timeout:
            timed_out = True
        else:
            raise LimitExceeded(
                f"{program} did not finish within {timeout_s:g} s and was killed.",
                "Retry with fewer GPUs or samples, or raise the server's --timeout.",
            ) from exc
    finally:
        # Timeout, client cancellation or any failure: never leave the child (or its children) running.
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                # TERM first: srun then cancels its job step on every node (a KILLed srun leaves it running).
                _signal_group(process, signal.SIGTERM)
                with anyio.move_on_after(CHILD_TERM_GRACE_S):
                    await process.wait()
            if process.returncode is None:
                _signal_group(process, signal.SIGKILL)
                with anyio.move_on_after(CHILD_REAP_TIMEOUT_S):
                    await process.wait()
            await process.aclose()
    return ProgramOutput(returncode, b"".join(out), b"".join(err), cut, timed_out)

