"""check_interconnect: is NCCL on the right transport and NIC, and does the fabric give the bandwidth it should?

Joins what the job and the nodes left behind into one verdict that names the link:
- NCCL's debug log (tools/interconnect/nccl_log.py): per node the network NCCL chose, the transport of each channel
  (NET/IB with or without GDRDMA, NET/Socket, P2P, SHM), the interfaces, P2P refusals, versions, WARN lines;
- nccl-tests outputs (nccl_tests.py): the peak busbw at large messages against what the fabric should give
  (expected.py, or expected_busbw_gbs), wrong results, mpirun'd binaries built without MPI, and the run below its
  peers when several runs of one test are given (one per node pair, or a suspect against a healthy node);
- node captures (captures.py): GPU pairs below the board's norm, inactive or slow NVLinks and their error counters,
  IB ports not Active or slower than their siblings, Ethernet links slower than the others, P2P refused (topo -p2p);
- affinity (affinity.py): each GPU's NIC from topo -m's NIC columns, joined with the NIC NCCL's channels use, and
  each rank's CPUs against its GPU's CPU Affinity (NCCL's `Setting affinity` lines, or job_pids live).
The judges live beside it (transports.py, bandwidth.py, nodes.py, over evidence.py); this module holds the tool's
input and result and the one verdict.
SOP: nccl_hang_or_slow (the network step), straggler.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio.to_thread
from pydantic import Field, field_validator, model_validator

from tools.cluster import collect_from_nodes, job_backend, node_name
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, TriageError
from tools.core.files import InputFile, expand_inputs, open_input
from tools.core.limits import NET_LIVE_TIMEOUT_S, NET_MAX_FILES, NET_MAX_FINDINGS, NET_SNIFF_BYTES
from tools.core.models import (
    Coverage,
    CoverageStatus,
    NameArg,
    NextStep,
    NodesInput,
    PathArg,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.interconnect.affinity import judge_live_cpu_affinity
from tools.interconnect.bandwidth import Bandwidth, has_nccl_lines, judge_tests
from tools.interconnect.captures import kind_of
from tools.interconnect.evidence import BRANCH, Evidence, Link, NetFinding
from tools.interconnect.live import LiveCapture, capture_this_node, pids_on_gpus
from tools.interconnect.nccl_tests import is_nccl_tests
from tools.interconnect.nodes import CAPTURE_FORMATS, judge_across_nodes, judge_capture, judge_captures
from tools.interconnect.transports import Transport, judge_logs

__all__ = ["CheckInterconnectInput", "CheckInterconnectResult", "check_interconnect"]


class CheckInterconnectInput(NodesInput):
    nccl_logs: list[PathArg] = Field(default_factory=list, max_length=64, description="Job logs with NCCL_DEBUG=INFO "
                                     "lines (files or globs; any launcher prefix; gzip too).")
    nccl_tests: list[PathArg] = Field(default_factory=list, max_length=64, description="nccl-tests outputs (text or "
                                      "-J JSON; several runs are compared, e.g. one per node pair).")
    captures: list[PathArg] = Field(default_factory=list, max_length=64, description="Saved outputs of nvidia-smi "
                                    "topo -m / -p2p r, nvidia-smi nvlink -s / -e, ibstat, ibstatus, ibv_devinfo, "
                                    "ibdev2netdev, ethtool IFACE (the kind is told from the content; the node from the "
                                    "folder or file name).")
    files: list[PathArg] = Field(default_factory=list, max_length=64, description="Any of the three, told apart by "
                                 "their content (what `gpu-triage check-interconnect FILES` passes): an nccl-tests "
                                 "output is read as nccl_tests, a node capture as captures, anything else as a job "
                                 "log for its NCCL lines (nccl_logs).")
    expected_busbw_gbs: float | None = Field(default=None, gt=0, le=10_000, description="What the fabric should "
                                             "give at large messages (GB/s), when the hardware tables do not know it.")
    live: bool = Field(default=False, description="Also capture this node now: nvidia-smi topo -m and nvlink -s/-e, "
                       "ibstat, ethtool on its physical interfaces (read-only; missing programs are notes). With "
                       "slurm_job / hosts / hostfile every node of the job is captured instead.")
    interfaces: list[NameArg] = Field(default_factory=list, max_length=32, description="The interfaces ethtool "
                                      "reads in live mode (default: every physical one); each must exist on the "
                                      "node.")
    job_pids: list[int] = Field(default_factory=list, max_length=64, description="Live mode: the job's process ids "
                                "on this node; each one's allowed CPUs (its affinity mask) are checked against the "
                                "CPU Affinity of the GPU it runs on (nvidia-smi topo -m and --query-compute-apps).")

    cli_positional = "files"  # `gpu-triage check-interconnect logs/*.log ibstat.txt`, as the other readers of files

    @field_validator("job_pids")
    @classmethod
    def _positive(cls, pids: list[int]) -> list[int]:
        if any(pid <= 0 for pid in pids):
            raise ValueError("job_pids are process ids (positive integers)")
        return pids

    @model_validator(mode="after")
    def _something(self) -> CheckInterconnectInput:
        if not (self.nccl_logs or self.nccl_tests or self.captures or self.files or self.live or self.local
                or self.slurm_job or self.hosts or self.hostfile):
            raise ValueError("pass files (or nccl_logs, nccl_tests, captures), or live (this node) or slurm_job / "
                             "hosts (every node of a job): at least one")
        if self.job_pids and not (self.live or self.local):
            raise ValueError("job_pids are read live: pass live=true (this node's processes)")
        if self.job_pids and (self.slurm_job is not None or self.hosts or self.hostfile):
            raise ValueError("job_pids are this node's processes: drop slurm_job / hosts / hostfile, or job_pids")
        return self


class CheckInterconnectResult(ToolResult):
    verdict: str = Field(description="The kind of the worst finding ('healthy' when none; 'unknown' when the "
                         "evidence read does not decide, see `decides`).")
    node: str | None = Field(default=None, description="Collector mode: the node this answer is from.")
    findings: list[NetFinding]
    transports: list[Transport]
    bandwidth: list[Bandwidth]
    links: list[Link]

    narrow_hint = "pass fewer logs or captures"

    def tables(self) -> list[Table]:
        return [
            Table("Findings", ["kind", "severity", "node", "rank", "evidence", "fix"],
                  [[f.kind, f.severity.value, f.node or "-", f.rank or "-", f.evidence, f.fix] for f in self.findings],
                  "findings"),
            Table("Bandwidth (nccl-tests)", ["file", "collective", "ranks", "nodes", "peak busbw GB/s", "at size",
                                             "expected", "ratio", "wrong"],
                  [[b.file, b.collective or "?", _cell(b.ranks), b.nodes, _cell(b.peak_busbw_gbs),
                    _cell(b.size_at_peak_bytes), _cell(b.expected_busbw_gbs), _cell(b.ratio), _cell(b.wrong)]
                   for b in self.bandwidth], "bandwidth"),
            Table("NCCL transports", ["node", "ranks", "version", "network", "interfaces", "transports", "warn"],
                  [[t.node, t.ranks, t.nccl_version or "?", t.network or "?", t.interfaces, t.transports,
                    str(t.warnings)] for t in self.transports], "transports"),
            Table("Links", ["node", "kind", "name", "state", "speed", "expected"],
                  [[k.node, k.kind, k.name, k.state, k.speed, k.expected] for k in self.links], "links"),
        ]


def _cell(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _check(params: CheckInterconnectInput, roots: tuple[Path, ...], deadline: float, live: list[LiveCapture],
           nodes: dict[str, CheckInterconnectResult | str],
           gpu_of: dict[int, int] | None = None) -> CheckInterconnectResult:
    found = Evidence()
    captures = expand_inputs(params.captures, roots, NET_MAX_FILES) if params.captures else []
    tests = expand_inputs(params.nccl_tests, roots, NET_MAX_FILES) if params.nccl_tests else []
    logs = expand_inputs(params.nccl_logs, roots, NET_MAX_FILES) if params.nccl_logs else []
    for file in expand_inputs(params.files, roots, NET_MAX_FILES) if params.files else []:
        {"nccl_tests": tests, "capture": captures, "nccl_log": logs}[_kind_of_file(file)].append(file)
    # First what the nodes have (saved, taken now, or collected from every node): the logs' and tests' judgements
    # use it (NIC rates for the expected busbw, NVLink for SHM).
    judge_captures(captures, found)
    for capture in live:
        judge_capture(capture.text, capture.name, node_name(), found)
    if params.job_pids:
        matrix = found.topologies.get(node_name())
        if matrix is None:
            found.notes.append("job_pids: no nvidia-smi topo -m on this node, so no GPU's CPU Affinity to judge "
                               "them by.")
        else:
            judge_live_cpu_affinity(matrix, node_name(), params.job_pids, gpu_of or {}, found)
    if (params.live or params.local) and not live and not nodes:
        found.coverage.append(Coverage.not_understood("this node (live)", "none of nvidia-smi topo -m / nvlink, "
                                                      "ibstat or ethtool gave output here (see the notes)"))
    for node, answer in nodes.items():
        _merge_node(node, answer, found)
    judge_across_nodes(found)
    # nccl-tests run with NCCL_DEBUG=INFO carry the job's NCCL lines: their transports are judged as a log's are.
    embedded = [file for file in tests if has_nccl_lines(file)]
    transports = judge_logs(logs, deadline, found, embedded) if logs or embedded else []
    if time.monotonic() > deadline:
        raise LimitExceeded("the check ran out of time.", "Pass fewer or smaller files, or raise --timeout.")
    bandwidth = judge_tests(tests, params.expected_busbw_gbs, found) if tests else []
    order = {Severity.crit: 0, Severity.warn: 1, Severity.unknown: 2, Severity.ok: 3}
    findings = sorted(found.findings, key=lambda f: order[f.severity])
    if len(findings) > NET_MAX_FINDINGS:
        found.notes.append(f"{len(findings) - NET_MAX_FINDINGS} more finding(s) not listed (the worst come first).")
        findings = findings[:NET_MAX_FINDINGS]
    missing = [name for name, given in (("nccl_logs", logs), ("nccl_tests", tests),
                                        ("captures", captures or live or nodes)) if not given]
    result = CheckInterconnectResult(
        severity=worst(f.severity for f in findings), verdict=findings[0].kind if findings else "healthy",
        conclusion=_conclude(findings, bandwidth, transports, missing), next_steps=_next(findings, missing),
        findings=findings, transports=transports, bandwidth=bandwidth, links=found.links, notes=found.notes[:10],
        coverage=found.coverage)
    if not findings:
        _undecided(result)
    elif result.severity is Severity.unknown:
        # Every finding is one the evidence does not decide (a GPU link below its speed with no sign of load, sockets
        # on a job whose node count is not said): the answer is unknown, and what decides is each one's fix.
        result.verdict = "unknown"
        result.decides = "; ".join(dict.fromkeys(f.fix for f in findings))[:600]
        result.conclusion = [f"Cannot tell: {findings[0].kind} {('on ' + findings[0].node) if findings[0].node else ''}"
                             f" is undecided: {findings[0].evidence}.".replace("  ", " "),
                             f"What decides: {findings[0].fix}"]
    return result


def _kind_of_file(file: InputFile) -> str:
    """Which input a file given as `files` is, from its head: an nccl-tests output (even one run with NCCL_DEBUG=INFO,
    whose NCCL lines are judged too), a node capture, else a job log, read whole for its NCCL lines (they may come
    after any amount of other output; one that has none is a coverage row saying so)."""
    try:
        stream, _ = open_input(file.path)
        with stream:
            head = stream.read(NET_SNIFF_BYTES).decode("utf-8", "replace")
    except (TriageError, OSError, EOFError):
        return "nccl_log"  # the log reader names what is wrong with it
    kind = kind_of(head)
    if kind == "nccl_tests" or is_nccl_tests(head):
        return "nccl_tests"
    return "nccl_log" if kind in ("nccl_log", "unknown") else "capture"


def _undecided(result: CheckInterconnectResult) -> None:
    """No finding, yet the evidence does not clear the fabric: a busbw with no figure to judge it by is no more
    healthy than it is low (15 GB/s is fine on one 100G NIC and a third of what 400G RoCE gives)."""
    unjudged = [b for b in result.bandwidth if b.ratio is None and b.peak_busbw_gbs is not None]
    unread = [c for c in result.coverage if c.status is CoverageStatus.not_understood]
    if not unjudged and not unread and result.coverage and all(c.status is CoverageStatus.partial
                                                               for c in result.coverage):
        # Read, but nothing in it could show a fault (lstopo gives a link's speed now, never what it can do).
        result.severity, result.verdict = Severity.unknown, "unknown"
        result.decides = ("lspci -vv of the GPUs and NICs (LnkCap against LnkSta), nvidia-smi -q (GPU Link Info), "
                          "ibstat or nvidia-smi topo -m as captures")
        result.conclusion = [f"Cannot tell: {result.coverage[0].input} was read only in part "
                             f"({result.coverage[0].detail}).", "Pass a capture that shows the links' state."]
        return
    if not unjudged and unread:
        # "No problem found" in what was not read is no clean bill: the link it shows may be the bad one.
        read = len(result.coverage) - len(unread)
        result.severity, result.verdict = Severity.unknown, "unknown"
        result.decides = ("The same outputs in a form this tool reads: " + ", ".join(CAPTURE_FORMATS)
                          + " as captures, NCCL_DEBUG=INFO logs as nccl_logs, nccl-tests output as nccl_tests")
        result.conclusion = [f"Cannot tell: {unread[0].input} was not understood ({unread[0].detail})"
                             + (f", and {len(unread) - 1} more input(s)" if len(unread) > 1 else "") + ".",
                             f"Nothing is wrong in the {read} input(s) read." if read else
                             "No input was read: pass the captures as the command printed them."]
        return
    if not unjudged:
        return
    first = unjudged[0]
    result.severity = Severity.unknown
    result.verdict = "unknown"
    result.decides = ("The fabric's figure: ibstat or ibv_devinfo of the nodes (the NICs' rate) as captures, "
                      "nvidia-smi topo -m / nvlink -s for a run within one node, or expected_busbw_gbs (what this "
                      "fabric gives at large messages)")
    where = f" across {first.nodes}" if first.nodes != "-" else ""
    result.conclusion = [
        f"Cannot tell whether the bandwidth is low: {first.file} peaks at {first.peak_busbw_gbs:g} GB/s busbw"
        f"{where}, and nothing given says what this fabric should give"
        + (f" ({len(unjudged) - 1} more run(s) alike)." if len(unjudged) > 1 else "."),
        "Pass the nodes' ibstat (or ibv_devinfo) as captures, or expected_busbw_gbs, and call again.",
    ]
    result.next_steps = [NextStep(branch=BRANCH, step="network", action="check_interconnect with captures=[ibstat "
                                  "of each node] or expected_busbw_gbs=<the fabric's busbw>", why="The NICs' rate "
                                  "sets the figure the busbw is judged by.")]


def _conclude(findings: list[NetFinding], bandwidth: list[Bandwidth], transports: list[Transport],
              missing: list[str]) -> list[str]:
    if findings:
        top = findings[0]
        where = " ".join(x for x in (f"on {top.node}" if top.node else "", f"(rank {top.rank})" if top.rank else "")
                         if x)
        said = [f"{top.kind} {where}: {top.evidence}.".replace("  ", " "), f"Fix: {top.fix}"]
        if len(findings) > 1:
            said.append(f"{len(findings) - 1} more finding(s): "
                        + ", ".join(sorted({f.kind for f in findings[1:]})) + ".")
        return said[:3]
    parts = []
    if bandwidth:
        best = [b for b in bandwidth if b.ratio is not None]
        parts.append(f"{len(bandwidth)} nccl-tests run(s) read" + (
            f", the lowest at {min(b.ratio or 0 for b in best):.0%} of expected" if best else
            " (no expected figure for this hardware: pass expected_busbw_gbs)"))
    if transports:
        parts.append(f"NCCL on {len(transports)} node(s) uses " + ", ".join(sorted({t.network or '?' for t in
                                                                                    transports})))
    first = "No interconnect problem found: " + "; ".join(parts) + "." if parts else "No interconnect problem found."
    return [first, f"Not given: {', '.join(missing)}." if missing else "Every kind of evidence was given."]


def _next(findings: list[NetFinding], missing: list[str]) -> list[NextStep]:
    if findings:
        first = findings[0]
        return [NextStep(branch=BRANCH, step="network", action=f"Fix {first.kind} ({first.fix.split('.')[0]}), then "
                         "rerun nccl-tests and check_interconnect", why="The link named is the one that is slow or "
                         "on the wrong path.")]
    if missing:
        return [NextStep(branch=BRANCH, step="network", action="check_interconnect with " + " and ".join(missing),
                         why="The evidence not given may hold the fault (NCCL_DEBUG=INFO logs, nccl-tests per node "
                         "pair, ibstat / topo -m captures).")]
    return [NextStep(branch="straggler", step="find", action="find_stragglers on the job's logs",
                     why="The interconnect looks healthy: the slow rank may compute or load data slowly instead.")]


def _merge_node(node: str, answer: CheckInterconnectResult | str, found: Evidence) -> None:
    """One node's collector answer into the job's evidence: its findings and links under its name."""
    if isinstance(answer, str):
        found.notes.append(f"{node}: no answer ({answer}).")
        found.coverage.append(Coverage.not_understood(node, f"no answer: {answer}"))
        return
    found.coverage.append(Coverage.partial(node, "answered, but could not judge its own captures")
                          if answer.severity is Severity.unknown else
                          Coverage.read(node, f"answered: {answer.verdict}"))
    for finding in answer.findings:
        found.findings.append(finding.model_copy(update={"node": finding.node or node}))
    found.links.extend(link.model_copy(update={"node": node}) for link in answer.links)
    found.notes.extend(f"{node}: {note}" for note in answer.notes[:3])


async def check_interconnect(params: CheckInterconnectInput, ctx: ToolContext) -> CheckInterconnectResult:
    """Is NCCL on the right transport and NIC, and does the fabric give the bandwidth it should? Reads NCCL_DEBUG=INFO
    logs (the network and the transport of every channel per node: NET/IB with or without GDRDMA, sockets, P2P,
    SHM; interfaces, P2P refusals, versions, WARN lines), nccl-tests outputs (peak busbw at large messages against
    the fabric's expected figure, wrong results, binaries built without MPI, the run below its peers) and saved
    captures (nvidia-smi topo -m, topo -p2p and nvlink -s/-e, ibstat, ibstatus, ibv_devinfo, ibdev2netdev, ethtool):
    GPU-NIC affinity (a GPU on a NIC across the sockets while one is PIX/PXB), ranks pinned off their GPU's NUMA
    node, P2P refused; one verdict that names the node, rank, NIC or GPU pair, with the fix. `files` takes any of
    the three and tells them apart by their content.
    """
    if not ctx.roots and (params.nccl_logs or params.nccl_tests or params.captures or params.files):
        raise BadInput("no roots are configured.", "Start the server with --root.")
    nodes: dict[str, CheckInterconnectResult | str] = {}
    live: list[LiveCapture] = []
    notes: list[str] = []
    backend = job_backend(params, ctx)
    if backend is not None:  # every node captures itself; its answer is merged here
        extra = ["--live", *(f"--interfaces={name}" for name in params.interfaces)]
        nodes = await collect_from_nodes(backend, "check-interconnect", CheckInterconnectResult, ctx,
                                         params.node_timeout_s, extra)
    elif params.live or params.local:
        live, notes = await capture_this_node(params.interfaces, min(NET_LIVE_TIMEOUT_S, ctx.remaining_s()))
    gpu_of: dict[int, int] = {}
    if params.job_pids and backend is None:
        gpu_of, said = await pids_on_gpus(min(NET_LIVE_TIMEOUT_S, ctx.remaining_s()))
        notes.extend(said)
    deadline = time.monotonic() + ctx.remaining_s()
    result = await anyio.to_thread.run_sync(_check, params, ctx.roots, deadline, live, nodes, gpu_of,
                                            abandon_on_cancel=True)
    result.notes = (notes + result.notes)[:12]
    if params.local:
        result.node = node_name()
    return result
