"""Every node of a job: run our own per-node collector on each, through Slurm or SSH, and read back one answer
per node.

The collector is `gpu-triage <tool> --local --json` on the node: the same tool, returning only what that node holds,
labelled with the node's name. The argv is built here from fixed parts and numbers; the interpreter comes from the
server's settings; nothing a caller passes reaches a command line except a job id (digits) or host names (checked
against a strict pattern). A node that does not answer in time is an answer too: its reason, while the other nodes
are still reported.

A backend is a small class with `label`, `nodes()` and `collect(argv, timeout_s)`. Slurm and SSH are here; a
Kubernetes backend (`kubectl exec` into each pod of the job, per pod the same argv) would be a third class, and
`backend_for` the only line that changes: the tools call `collect_from_nodes` and never see which backend ran.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio

from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, Unavailable
from tools.core.files import read_regular
from tools.core.limits import (
    MAX_MAX_BYTES,
    NODES_FANOUT_MARGIN_S,
    NODES_MAX,
    NODES_MAX_OUTPUT_BYTES,
    NODES_MAX_OUTPUT_BYTES_PER_NODE,
    NODES_SSH_CONNECT_TIMEOUT_S,
    NODES_SSH_PARALLEL,
)
from tools.core.models import JobInput, ToolResult
from tools.core.proc import run_program

__all__ = ["NodeAnswer", "NodeBackend", "SlurmJob", "SshHosts", "collect_from_nodes", "job_backend", "parse_host",
           "node_name", "slurm_pids_on_this_node"]

ResultT = TypeVar("ResultT", bound=ToolResult)

# A host as ssh and Slurm spell it; never starting with '-' (an option), no spaces or shell characters.
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]*")
# Slurm's compressed node list (node[01-04,07],gpu-a1): checked before it goes to scontrol and srun.
_NODE_LIST = re.compile(r"[A-Za-z0-9._\-\[\],]+")
_LABELLED = re.compile(rb"^\s*(\d+): ?(.*)$")
_LAUNCH_FAILED = re.compile(r"[Tt]ask launch for \S+ failed on node (\S+?): (.+)$")


@dataclass(frozen=True)
class NodeAnswer:
    """One node's answer: the collector's JSON document, or why there is none."""

    node: str
    document: dict[str, Any] | None
    failure: str | None = None


class NodeBackend(Protocol):
    @property
    def label(self) -> str: ...

    async def nodes(self) -> list[str]: ...

    async def collect(self, argv: Sequence[str], timeout_s: float) -> list[NodeAnswer]: ...

    def log_paths(self) -> list[str]: ...


def _decode_document(raw: bytes) -> dict[str, Any] | str:
    """The collector's JSON document (one line), or why there is none. A login shell may print a banner first
    (a .bashrc that echoes): the document is then the last line that starts with '{'."""
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return "the collector printed nothing"
    candidates = [text] + [line for line in reversed(text.splitlines()[1:]) if line.startswith("{")][:1]
    for candidate in candidates:
        try:
            document = json.loads(candidate)
        except ValueError:
            continue
        return document if isinstance(document, dict) else "the collector's output is not a JSON object"
    return f"the collector's output is not JSON (starts {text[:80]!r})"


def _collector_failure(message: str) -> str:
    """Why a node's collector gave no answer, with the fix for the two set-up mistakes a new cluster shows first."""
    text = f"the collector failed: {message}"
    if "No such file or directory" in message or "command not found" in message:
        return (f"{text} -- the interpreter is not there on that node: set the server's --remote-python "
                "(GPU_TRIAGE_REMOTE_PYTHON) to the Python that has gpu-triage-mcp on the nodes")
    if "No module named" in message:
        return f"{text} -- install gpu-triage-mcp (the same version) into that node's Python"
    return text


def _by_task(raw: bytes) -> dict[int, list[bytes]]:
    """srun --label output split by task: `3: text` lines, in order."""
    parts: dict[int, list[bytes]] = {}
    for line in raw.splitlines():
        labelled = _LABELLED.match(line)
        if labelled:
            parts.setdefault(int(labelled.group(1)), []).append(labelled.group(2))
    return parts


def _last_line(raw: bytes, default: str) -> str:
    lines = [line.strip() for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else default


# ---------------------------------------------------------------------------------------------------- Slurm


@dataclass
class SlurmJob:
    """A running Slurm job: its nodes from `scontrol show job -o`; the collector runs as one extra job step
    (`srun --overlap`, one task per node), so it reaches the job's processes under the job's own limits."""

    job_id: str
    state: str = ""
    node_list: str = ""
    stdout_path: str | None = None
    stderr_path: str | None = None
    _nodes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"Slurm job {self.job_id}"

    def log_paths(self) -> list[str]:
        return [p for p in (self.stdout_path, self.stderr_path) if p]

    async def _load(self, timeout_s: float) -> None:
        out = await run_program("scontrol", ["show", "job", "-o", self.job_id], timeout_s=timeout_s)
        text = out.stdout.decode("utf-8", "replace")
        if out.returncode != 0 or "JobId=" not in text:
            why = _last_line(out.stderr, "no such job")
            raise BadInput(f"Slurm has no job {self.job_id} ({why}).",
                           "Check the id with `squeue -u $USER`; a finished job can no longer be inspected live.")
        fields = dict(re.findall(r"(?:^|\s)(JobState|NodeList|StdOut|StdErr)=(\S*)", text.splitlines()[0]))
        self.state = fields.get("JobState", "")
        self.node_list = fields.get("NodeList", "")
        self.stdout_path = fields.get("StdOut") or None
        self.stderr_path = fields.get("StdErr") or None
        if self.state != "RUNNING":
            raise BadInput(f"Slurm job {self.job_id} is {self.state or 'in an unknown state'}, not RUNNING: there "
                           "are no live processes to collect from.",
                           "For a job that ended, read its logs (diagnose_logs) and saved dumps (from_files, "
                           "analyze_flight_recorder).")
        if not _NODE_LIST.fullmatch(self.node_list):
            raise BadInput(f"Slurm job {self.job_id} has an unexpected node list {self.node_list!r}.")

    async def nodes(self) -> list[str]:
        if not self._nodes:
            await self._load(timeout_s=10.0)
            out = await run_program("scontrol", ["show", "hostnames", self.node_list], timeout_s=10.0)
            self._nodes = [n for n in out.stdout.decode("utf-8", "replace").split() if _HOST.fullmatch(n)]
            if not self._nodes:
                raise Unavailable(f"scontrol could not expand the node list {self.node_list!r}.")
            if len(self._nodes) > NODES_MAX:
                raise BadInput(f"Slurm job {self.job_id} spans {len(self._nodes)} nodes; at most {NODES_MAX} are "
                               "collected in one call.")
        return self._nodes

    async def collect(self, argv: Sequence[str], timeout_s: float) -> list[NodeAnswer]:
        nodes = await self.nodes()
        # --overlap: the job's own steps hold every CPU, and srun would otherwise wait for one, silently.
        # -N/-w/--ntasks-per-node=1: exactly one collector per node, on every node. --label: each output line
        # says which task (node) wrote it, so the nodes' documents can be told apart.
        out = await run_program(
            "srun",
            ["--overlap", "--jobid", self.job_id, "-N", str(len(nodes)), "-w", self.node_list,
             "--ntasks-per-node=1", "--label", "--kill-on-bad-exit=0", "--quiet", *argv],
            timeout_s=timeout_s + NODES_FANOUT_MARGIN_S,
            max_output_bytes=min(NODES_MAX_OUTPUT_BYTES_PER_NODE * len(nodes), NODES_MAX_OUTPUT_BYTES),
            partial_on_timeout=True,
        )
        by_task = _by_task(out.stdout)
        errors_by_task = _by_task(out.stderr)
        answers: dict[str, NodeAnswer] = {}
        failures: dict[str, str] = {}
        for task, parts in sorted(by_task.items()):
            # srun may split one long line into several labelled pieces: the document is their concatenation.
            document = _decode_document(b"".join(parts))
            node = document.get("node") if isinstance(document, dict) else None
            if isinstance(document, dict) and isinstance(node, str) and node in nodes:
                answers[node] = NodeAnswer(node, document)
            elif task < len(nodes):
                failures[nodes[task]] = document if isinstance(document, str) else "the collector named no node"
        for task, parts in errors_by_task.items():
            # Tasks are placed one per node in node-list order (-N n --ntasks-per-node=1, block distribution).
            if task < len(nodes) and nodes[task] not in answers:
                failures[nodes[task]] = _collector_failure(_last_line(b"\n".join(parts), "no message"))
        for text in out.stderr.decode("utf-8", "replace").splitlines():
            launch = _LAUNCH_FAILED.search(text)
            if launch and launch.group(1) in nodes:
                failures[launch.group(1)] = f"srun could not start the collector there: {launch.group(2).strip()}"
        result: list[NodeAnswer] = []
        for node in nodes:
            if node in answers:
                result.append(answers[node])
            elif node in failures:
                result.append(NodeAnswer(node, None, failures[node]))
            elif out.timed_out:
                result.append(NodeAnswer(node, None, f"no answer within {timeout_s + NODES_FANOUT_MARGIN_S:g} s "
                                         "(node hung, overloaded or unreachable)"))
            else:
                result.append(NodeAnswer(node, None, "srun ended without an answer from this node: "
                                         + _last_line(out.stderr, f"srun exit code {out.returncode}")))
        return result


# ---------------------------------------------------------------------------------------------------------- SSH


@dataclass(frozen=True)
class SshTarget:
    host: str
    user: str | None = None
    port: int | None = None

    @property
    def name(self) -> str:
        where = self.host if self.port is None else f"{self.host}:{self.port}"
        return where if self.user is None else f"{self.user}@{where}"


def parse_host(raw: str) -> SshTarget:
    """`[user@]host[:port]`, strictly: a host that could be read as an option or hold shell text is refused."""
    text = raw.strip()
    user: str | None = None
    port: int | None = None
    if "@" in text:
        user, text = text.split("@", 1)
        if not _USER.fullmatch(user):
            raise BadInput(f"host {raw!r}: {user!r} is not a user name.", "Use [user@]host[:port].")
    if ":" in text:
        text, port_text = text.rsplit(":", 1)
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise BadInput(f"host {raw!r}: {port_text!r} is not a port.", "Use [user@]host[:port].")
        port = int(port_text)
    if not _HOST.fullmatch(text) or len(text) > 253:
        raise BadInput(f"host {raw!r} is not a host name.",
                       "Use letters, digits, '.', '-' and '_': [user@]host[:port].")
    return SshTarget(text, user, port)


class SshHosts:
    """Named hosts over ssh: key or agent only (BatchMode: never a password prompt), a connect timeout, the
    operator's ssh_config. One ssh per host, NODES_SSH_PARALLEL at a time, each bounded by the same deadline."""

    def __init__(self, targets: Sequence[SshTarget], ssh_config: Path | None) -> None:
        if len({t.name for t in targets}) != len(targets):
            raise BadInput("the same host is given twice.", "Name each host once.")
        self.targets = list(targets)
        self.ssh_config = ssh_config

    @property
    def label(self) -> str:
        return f"{len(self.targets)} host(s) over SSH"

    async def nodes(self) -> list[str]:
        return [t.name for t in self.targets]

    def log_paths(self) -> list[str]:
        return []

    def _ssh_args(self, target: SshTarget, argv: Sequence[str]) -> list[str]:
        args = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={NODES_SSH_CONNECT_TIMEOUT_S}",
                "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no", "-T"]
        if self.ssh_config is not None:
            args += ["-F", str(self.ssh_config)]
        if target.port is not None:
            args += ["-p", str(target.port)]
        if target.user is not None:
            args += ["-l", target.user]
        # ssh hands the remote command to the remote user's shell as one string: every word is quoted, and
        # every word is ours (interpreter from settings, fixed flags, numbers).
        return [*args, "--", target.host, " ".join(shlex.quote(word) for word in argv)]

    async def collect(self, argv: Sequence[str], timeout_s: float) -> list[NodeAnswer]:
        answers: list[NodeAnswer | None] = [None] * len(self.targets)
        limiter = anyio.CapacityLimiter(NODES_SSH_PARALLEL)

        async def one(index: int, target: SshTarget) -> None:
            async with limiter:
                out = await run_program("ssh", self._ssh_args(target, argv),
                                        timeout_s=timeout_s + NODES_FANOUT_MARGIN_S,
                                        max_output_bytes=NODES_MAX_OUTPUT_BYTES_PER_NODE, partial_on_timeout=True)
            if out.timed_out:
                answers[index] = NodeAnswer(target.name, None, f"no answer within {timeout_s + NODES_FANOUT_MARGIN_S:g}"
                                            " s (host hung, overloaded or unreachable)")
            elif out.returncode == 255:
                answers[index] = NodeAnswer(target.name, None, _ssh_failure(out.stderr))
            else:
                document = _decode_document(out.stdout)
                if isinstance(document, str):
                    why = _last_line(out.stderr, document)
                    answers[index] = NodeAnswer(target.name, None, _collector_failure(why))
                else:
                    answers[index] = NodeAnswer(target.name, document)

        async with anyio.create_task_group() as group:
            for index, target in enumerate(self.targets):
                group.start_soon(one, index, target)
        return [a for a in answers if a is not None]


def _ssh_failure(stderr: bytes) -> str:
    text = _last_line(stderr, "ssh failed")
    if "Permission denied" in text:
        return f"ssh refused the login ({text}): install a key for this user (no passwords are ever used)"
    if "Host key verification failed" in text or "host key" in text.lower():
        return f"ssh does not know this host's key ({text}): add it to known_hosts (ssh-keyscan)"
    if "timed out" in text or "Connection refused" in text or "No route" in text or "resolve" in text:
        return f"ssh could not connect ({text})"
    return f"ssh failed ({text})"


# ------------------------------------------------------------------------------------------------------- Fan-out


def job_backend(params: JobInput, ctx: ToolContext) -> NodeBackend | None:
    """The backend a call's job-level arguments ask for, or None for a call about this node only."""
    hosts = list(params.hosts)
    if params.hostfile is not None:
        hosts += read_hostfile(ctx.path(params.hostfile))
    if params.slurm_job is not None and hosts:
        raise BadInput("give slurm_job or hosts, not both.", "Slurm finds the job's nodes itself.")
    if params.slurm_job is not None:
        return SlurmJob(params.slurm_job)
    if hosts:
        if len(hosts) > NODES_MAX:
            raise BadInput(f"{len(hosts)} hosts given; at most {NODES_MAX} in one call.")
        return SshHosts([parse_host(h) for h in hosts], ctx.ssh_config)
    return None


def read_hostfile(path: Path) -> list[str]:
    """Hosts from a file: one per line (MPI-style `host slots=8` keeps the host), '#' comments."""
    hosts: list[str] = []
    text = read_regular(path, 1024 * 1024).decode("utf-8", errors="replace")
    for line in text.splitlines()[: NODES_MAX + 1]:
        word = line.split("#", 1)[0].split()
        if word:
            hosts.append(word[0])
    if not hosts:
        raise BadInput(f"hostfile {path.name} names no host.", "One host per line, e.g. `gpu-node-01`.")
    return hosts


def collector_argv(tool_cli_name: str, ctx: ToolContext, node_timeout_s: float, extra: Sequence[str] = ()) -> list[str]:
    """The per-node command: our own CLI in collector mode, with fixed flags and numbers only."""
    return [ctx.remote_python, "-m", "mcp_server.cli", tool_cli_name, "--local", "--json",
            "--timeout", f"{node_timeout_s:g}", "--max-bytes", str(MAX_MAX_BYTES), *extra]


async def collect_from_nodes(backend: NodeBackend, tool_cli_name: str, result_model: type[ResultT], ctx: ToolContext,
                             node_timeout_s: float, extra: Sequence[str] = ()) -> dict[str, ResultT | str]:
    """Run the collector for `tool_cli_name` on every node of `backend`, within the call's remaining time: per node,
    its answer as `result_model`, or why there is none (node order kept)."""
    budget = ctx.remaining_s() - NODES_FANOUT_MARGIN_S - 1.0
    if budget < 1.0:
        raise BadInput("not enough of the call's time is left to reach the nodes.", "Raise the server's --timeout.")
    node_timeout_s = min(node_timeout_s, budget)
    ctx.progress.update(0, None, f"{backend.label}: {tool_cli_name} on every node (each within {node_timeout_s:.0f} s)")
    answers = await backend.collect(collector_argv(tool_cli_name, ctx, node_timeout_s, extra), node_timeout_s)
    results: dict[str, ResultT | str] = {}
    for answer in answers:
        if answer.document is None:
            results[answer.node] = answer.failure or "no answer"
            continue
        try:
            results[answer.node] = result_model.model_validate(answer.document)
        except ValueError as exc:
            results[answer.node] = (f"the collector's answer does not fit this version of gpu-triage-mcp "
                                    f"({str(exc).splitlines()[0]}): install the same version on the nodes")
    return results


async def slurm_pids_on_this_node() -> set[int] | None:
    """In a Slurm job step: the pids of this job's other steps on this node (`scontrol listpids`), so the collector
    looks at this job only. None outside Slurm or where scontrol cannot tell."""
    job, node = os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURMD_NODENAME", "")
    if not job.isdigit() or not _HOST.fullmatch(node):
        return None
    try:
        out = await run_program("scontrol", ["listpids", job, node], timeout_s=10.0)
    except (Unavailable, LimitExceeded, BadInput):
        return None
    if out.returncode != 0:
        return None
    own_step = os.environ.get("SLURM_STEP_ID")
    pids: set[int] = set()
    for line in out.stdout.decode("utf-8", "replace").splitlines()[1:]:
        parts = line.split()  # PID JOBID STEPID LOCALID GLOBALID
        if len(parts) >= 3 and parts[0].isdigit() and parts[2] != own_step:
            pids.add(int(parts[0]))
    return pids


def node_name() -> str:
    """This node's name as the job knows it: Slurm's node name (emulated nodes share one hostname), else the host's."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()
