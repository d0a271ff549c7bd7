"""The judgement of nccl-tests runs: the peak busbw at large messages against the fabric's figure, wrong results,
binaries built without MPI, a busbw that falls off at large sizes, the run below its peers and the node in
every slow run."""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, Field

from tools.core.files import InputFile
from tools.core.models import Coverage, Severity
from tools.core.thresholds import (
    BUSBW_CRIT_RATIO,
    BUSBW_LOW_RATIO,
    BUSBW_PEER_RATIO,
    FALL_OFF_MIN_BYTES,
    FALL_OFF_RATIO,
    PCIE_JUDGE_MIN_BYTES,
)
from tools.interconnect.evidence import Evidence, read_capture
from tools.interconnect.expected import expected_busbw, pcie_busbw, platform_floor
from tools.interconnect.nccl_tests import NcclTestRun, read_nccl_tests

__all__ = ["Bandwidth", "has_nccl_lines", "judge_tests"]

# Collectives whose busbw on a PCIe ring is the link's one-way rate (alltoall and sendrecv depend on the pattern).
_RING_COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"})


def has_nccl_lines(file: InputFile) -> bool:
    """Whether an nccl-tests output also holds NCCL's own INFO/WARN lines (run with NCCL_DEBUG=INFO)."""
    return re.search(r"NCCL (?:INFO|WARN) ", read_capture(file)) is not None


class Bandwidth(BaseModel):
    file: str
    collective: str | None
    ranks: int | None
    nodes: str = Field(description="The hosts of the ranks (from the '# Rank' lines).")
    peak_busbw_gbs: float | None
    size_at_peak_bytes: int | None
    expected_busbw_gbs: float | None
    expected_from: str | None
    ratio: float | None = Field(description="peak / expected.")
    wrong: int | None = Field(description="Wrong elements (#wrong columns); None when not checked.")
    avg_busbw_footer: float | None = Field(description="The footer's average: depends on the size range, never "
                                           "the verdict.")


def judge_tests(files: Sequence[InputFile], expected_arg: float | None, found: Evidence) -> list[Bandwidth]:
    rows: list[Bandwidth] = []
    runs: list[NcclTestRun] = []
    for file in files:
        text = read_capture(file)
        read = read_nccl_tests(text, file.name)
        if not read:
            found.notes.append(f"{file.name}: no nccl-tests table in it.")
            found.coverage.append(Coverage.not_understood(file.name, "no nccl-tests table in it", [
                "nccl-tests text (all_reduce_perf ...)", "nccl-tests -J JSON"]))
        elif not any(run.rows for run in read):
            found.coverage.append(Coverage.partial(file.name, "nccl-tests header(s) but no row of results"))
        else:
            found.coverage.append(Coverage.read(file.name, f"nccl-tests: {len(read)} run(s)"))
        runs.extend(read)
    nic_rates = found.nic_rates()
    for run in runs:
        peak = run.peak
        hosts = run.hosts
        gpus = [r.gpu for r in run.ranks]
        per_node = max(Counter(r.host for r in run.ranks).values(), default=run.gpus_per_process or 1)
        rates = [rate for host in hosts for rate in nic_rates.get(host, [])]
        node_rates = nic_rates.get(hosts[0], []) if hosts else []
        expectation = expected_busbw(gpus, len(hosts), per_node, node_rates or (rates[:8] if rates else None))
        largest = max((size for size, _ in run.rows), default=0)
        if expectation is None and len(hosts) == 1 and per_node >= 2 and largest >= PCIE_JUDGE_MIN_BYTES \
                and (run.collective is None or run.collective in _RING_COLLECTIVES):
            expectation = pcie_busbw(gpus)
        if expectation is None and expected_arg is None and largest >= PCIE_JUDGE_MIN_BYTES and peak is not None:
            # Nothing names the fabric: the platform's floor can show the run low, never clear it (left unjudged).
            floor = platform_floor(gpus, len(hosts))
            expectation = floor if floor is not None and peak[1] < BUSBW_LOW_RATIO * floor.busbw_gbs else None
        expected = expected_arg if expected_arg is not None else (expectation.busbw_gbs if expectation else None)
        basis = "expected_busbw_gbs" if expected_arg is not None else (expectation.basis if expectation else None)
        ratio = round(peak[1] / expected, 3) if peak and expected else None
        rows.append(Bandwidth(file=run.file, collective=run.collective, ranks=len(run.ranks) or None,
                              nodes=", ".join(hosts[:8]) + (f" (+{len(hosts) - 8})" if len(hosts) > 8 else "") or "-",
                              peak_busbw_gbs=peak[1] if peak else None, size_at_peak_bytes=peak[0] if peak else None,
                              expected_busbw_gbs=expected, expected_from=basis, ratio=ratio, wrong=run.wrong,
                              avg_busbw_footer=run.avg_busbw_footer))
        where = ", ".join(hosts[:4]) or None
        if run.single_process_runs:
            found.add("single_process_test", Severity.warn,
                      f"{run.file}: every process printed its own header and Rank 0 ({len(hosts) or '?'} host(s)): "
                      "each tested its own GPUs alone, nothing crossed the network",
                      "Rebuild nccl-tests with MPI=1 (make MPI=1 MPI_HOME=...) and rerun under mpirun/srun.", where)
        elif run.one_rank:
            # Not a fault (a one-GPU smoke test is a fair thing to run) and not a healthy fabric either: unknown.
            found.add("single_process_test", Severity.unknown,
                      f"{run.file}: a one-rank test (busbw 0 at every size while algbw is not, or a single rank "
                      "listed): nothing crossed any link, so its bandwidth says nothing about the interconnect",
                      "Rerun with every GPU of the node (-g N, or one rank per GPU under mpirun/srun) and across "
                      "nodes to measure the fabric.", where)
        if (run.wrong or 0) > 0 or run.failed:
            found.add("wrong_results", Severity.crit, f"{run.file}: {run.wrong or run.out_of_bounds} wrong "
                      "element(s) (Out of bounds values FAILED)" if run.failed else
                      f"{run.file}: {run.wrong} wrong element(s) in the #wrong columns",
                      "Data corruption on the path: rerun per node pair to find it; check GPU memory (ECC, Xid) and "
                      "the links (nvidia-smi nvlink -e, IB port counters).", where)
        for error in run.errors[:1]:
            found.add("nccl_warn", Severity.crit, f"{run.file}: {error}",
                      "Run again with NCCL_DEBUG=INFO and pass the log as nccl_logs.", where)
        _falls_off(run, found)
        if ratio is not None and ratio < BUSBW_LOW_RATIO and peak is not None:
            found.add("busbw_low", Severity.crit if ratio < BUSBW_CRIT_RATIO else Severity.warn,
                      f"{run.file}: {run.collective or 'test'} peaks at {peak[1]:g} GB/s busbw (at {peak[0]} B) "
                      f"against {expected:g} expected ({basis}): {ratio:.0%}",
                      "Find the slow link: run the test per node pair (or this node against a healthy one), check "
                      "NCCL's transports (nccl_logs) and the NICs (ibstat, ethtool).", where)
    _peers(runs, rows, found)
    return rows


def _falls_off(run: NcclTestRun, found: Evidence) -> None:
    """busbw should rise with the message size, then hold: a run whose largest messages get far less than its
    peak has a limit on the path (congestion, a flapping link, a PCIe or NIC limit), whatever the fabric."""
    by_size = sorted(run.rows)
    peak = run.peak
    if not by_size or peak is None:
        return
    size, last = by_size[-1]
    if size >= FALL_OFF_MIN_BYTES and peak[0] < size and last < FALL_OFF_RATIO * peak[1]:
        found.add("busbw_low", Severity.warn, f"{run.file}: busbw falls from {peak[1]:g} GB/s at {peak[0]} B to "
                  f"{last:g} GB/s at {size} B (it should rise with the size, then hold)",
                  "A limit on the path at large messages: congestion or a flapping link (IB port counters, "
                  "link_downed), NCCL_ALGO/PROTO, PCIe or NIC limits; rerun per node pair to find the node.",
                  ", ".join(run.hosts[:4]) or None)


def _peers(runs: list[NcclTestRun], rows: list[Bandwidth], found: Evidence) -> None:
    """Several runs of one test (a node pair each, or suspect and healthy): the ones below their peers, and the node
    that is in every slow run and in no healthy one."""
    groups: dict[tuple[str | None, int], list[int]] = defaultdict(list)
    for index, run in enumerate(runs):
        if run.peak and not run.single_process_runs and not run.one_rank:
            groups[(run.collective, len(run.ranks))].append(index)
    for (collective, _), members in groups.items():
        if len(members) < 2:
            continue
        slow_hosts: list[set[str]] = []
        healthy_hosts: set[str] = set()
        for index in members:
            others = [runs[i].peak[1] for i in members if i != index and runs[i].peak]  # type: ignore[index]
            mine = runs[index].peak
            if not others or mine is None:
                continue
            median = statistics.median(others)
            hosts = runs[index].hosts
            if mine[1] >= BUSBW_PEER_RATIO * median:
                healthy_hosts.update(hosts)
                continue
            slow_hosts.append(set(hosts))
            found.add("busbw_low", Severity.crit if mine[1] < BUSBW_CRIT_RATIO * median else Severity.warn,
                      f"{runs[index].file} ({', '.join(hosts[:4]) or 'hosts not printed'}): {collective or 'test'}"
                      f" peaks at {mine[1]:g} GB/s, the other {len(others)} run(s) at {median:g} (median): "
                      f"{mine[1] / median:.0%}",
                      "The nodes of this run hold the link that is slow: check their NICs (ibstat, port "
                      "counters), NCCL transports (nccl_logs) and drain the node that is in every slow pair.",
                      ", ".join(hosts[:4]) or None)
        common = set.intersection(*slow_hosts) - healthy_hosts if slow_hosts else set()
        if common and len(slow_hosts) >= 1 and healthy_hosts:
            node = sorted(common)[0]
            found.add("busbw_low", Severity.crit, f"{node} is in every slow {collective or 'test'} run "
                      f"({len(slow_hosts)}) and in none of the healthy ones: its link is the slow one",
                      "Drain that node and check its NICs (ibstat: Active, rate; port counters), cables and NCCL "
                      "transports; rerun its pairs after the fix.", node)
