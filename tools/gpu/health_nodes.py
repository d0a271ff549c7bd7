"""health_check over every node of a job: each node's own findings, and the node that stands out from the others.

A node's collector judges its GPUs against fixed thresholds (tools/thresholds.py). Across nodes there is a second
question: which node is not like the rest (clocks lower, GPUs hotter or idler, host busier). Each node is compared
with the median of the OTHER nodes, only in the direction that hurts, and only beyond a floor that same-model
nodes do not reach by chance. The output stays small for 64+ nodes: the nodes that stand out or failed, one row
each (at most NODES_MAX_ROWS), then one distribution row per measure over all nodes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from tools.core.limits import NODES_MAX_ROWS
from tools.core.models import Finding, Severity, worst
from tools.gpu.checks import by_severity

__all__ = ["NodeHealthRow", "NodeSpreadRow", "node_measures", "merge_health_findings"]


class NodeHealthRow(BaseModel):
    node: str
    status: str = Field(description="'ok', 'unknown', 'warn', 'crit' (its worst finding), 'stands_out' or "
                        "'no_answer'.")
    gpus: int | None = None
    why: str = Field(description="Its worst finding, how it differs from the other nodes, or why it gave no answer.")


class NodeSpreadRow(BaseModel):
    measure: str
    nodes: int = Field(description="Nodes that reported it.")
    min: float
    median: float
    max: float
    worst_node: str


@dataclass(frozen=True)
class _Measure:
    name: str
    unit: str
    # Direction that hurts (+1: higher is worse) and the smallest departure from the other nodes that counts.
    worse: int
    floor: float
    branch: str
    meaning: str


_MEASURES = (
    _Measure("GPU SM clock, median % of max", "%", -1, 10.0, "straggler",
             "its GPUs run at lower clocks than the other nodes' (thermal, power cap or a clock setting): every "
             "synchronous step waits for this node"),
    _Measure("GPU temperature, max", "C", +1, 12.0, "straggler",
             "a GPU runs much hotter than on the other nodes (cooling, airflow or a failing fan)"),
    _Measure("GPU utilisation, median", "%", -1, 30.0, "straggler",
             "its GPUs are much less busy than the other nodes': the ranks there wait or starve"),
    _Measure("GPU power, median % of limit", "%", -1, 25.0, "straggler",
             "its GPUs draw much less power than the other nodes' at the same work: capped or waiting"),
    _Measure("host load per core", "", +1, 0.5, "gpu_utilization_low",
             "its CPUs are much busier than the other nodes' (data loading, a foreign process)"),
    _Measure("host memory available", "%", -1, 25.0, "oom",
             "it has much less free host memory than the other nodes (a leak, page cache, a foreign process)"),
)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def node_measures(gpus: list[dict[str, float | None]], host: dict[str, float | None] | None) -> dict[str, float]:
    """A node's values of the cross-node measures, from its GPUs' and host's readings (missing ones left out)."""
    def per_gpu(value: Callable[[dict[str, float | None]], float | None]) -> list[float]:
        return [v for v in (value(g) for g in gpus) if v is not None]

    def ratio(a: float | None, b: float | None) -> float | None:
        return 100.0 * a / b if a is not None and b else None

    found: dict[str, float | None] = {
        _MEASURES[0].name: _median(per_gpu(lambda g: ratio(g["sm_clock_mhz"], g["sm_clock_max_mhz"]))),
        _MEASURES[1].name: max(per_gpu(lambda g: g["temperature_c"]), default=None),
        _MEASURES[2].name: _median(per_gpu(lambda g: g["utilization_gpu_pct"])),
        _MEASURES[3].name: _median(per_gpu(lambda g: ratio(g["power_draw_w"], g["power_limit_w"]))),
    }
    if host is not None:
        load, cores = host.get("load_1m"), host.get("cpu_count")
        found[_MEASURES[4].name] = load / cores if load is not None and cores else None
        found[_MEASURES[5].name] = ratio(host.get("memory_available_mib"), host.get("memory_total_mib"))
    return {k: float(v) for k, v in found.items() if v is not None}


def _format(value: float, unit: str) -> str:
    return f"{value:.0f}{unit}" if unit else f"{value:.2f}"


def merge_health_findings(
    per_node: dict[str, tuple[list[Finding], dict[str, float], int | None] | str],
) -> tuple[list[Finding], list[NodeHealthRow], list[NodeSpreadRow]]:
    """Findings for the job (each node's own non-ok findings, labelled; a finding per node that stands out or did
    not answer), the node rows worth showing, and the spread of each measure over the nodes."""
    findings: list[Finding] = []
    rows: list[NodeHealthRow] = []
    answered = {node: value for node, value in per_node.items() if not isinstance(value, str)}
    for node, answer in per_node.items():
        if isinstance(answer, str):
            findings.append(Finding(check=f"{node}: collector", value=answer, threshold="an answer in time",
                                    severity=Severity.warn, meaning="no health data from this node: check it by hand "
                                    "(ssh, `scontrol show node`) before trusting the job-level verdict"))
            rows.append(NodeHealthRow(node=node, status="no_answer", why=answer))
    standing_out: dict[str, list[str]] = {}
    spread: list[NodeSpreadRow] = []
    for measure in _MEASURES:
        values = {node: m[measure.name] for node, (_, m, _) in answered.items() if measure.name in m}
        if not values:
            continue
        worst_node = max(values, key=lambda n: measure.worse * values[n])
        if min(values.values()) == max(values.values()):
            worst_node = "-"
        spread.append(NodeSpreadRow(measure=measure.name + (f" ({measure.unit})" if measure.unit else ""),
                                    nodes=len(values), min=round(min(values.values()), 2),
                                    median=round(statistics.median(values.values()), 2),
                                    max=round(max(values.values()), 2), worst_node=worst_node))
        if len(values) < 2:
            continue
        for node, value in values.items():
            others = statistics.median(v for n, v in values.items() if n != node)
            if measure.worse * (value - others) >= measure.floor:
                standing_out.setdefault(node, []).append(
                    f"{measure.name} {_format(value, measure.unit)} vs {_format(others, measure.unit)} on the others")
                findings.append(Finding(
                    check=f"{node}: {measure.name} vs the other nodes", value=_format(value, measure.unit),
                    threshold=f"{'+' if measure.worse > 0 else '-'}{_format(measure.floor, measure.unit)} from the "
                    f"others' median {_format(others, measure.unit)}", severity=Severity.warn,
                    meaning=f"this node stands out: {measure.meaning}", sop_branch=measure.branch))
    for node, (node_findings, _, gpu_count) in answered.items():
        bad = [f for f in node_findings if f.severity is not Severity.ok]
        findings += [f.model_copy(update={"check": f"{node}: {f.check}"}) for f in bad]
        status = worst(f.severity for f in bad).value if bad else "ok"
        if node in standing_out:
            rows.append(NodeHealthRow(node=node, status="stands_out" if status == "ok" else status, gpus=gpu_count,
                                      why="; ".join(standing_out[node])))
        elif bad:
            lead = by_severity(bad)[0]
            rows.append(NodeHealthRow(node=node, status=status, gpus=gpu_count, why=f"{lead.check} = {lead.value}"))
    order = {"crit": 0, "no_answer": 1, "stands_out": 2, "warn": 3, "unknown": 4, "ok": 5}
    rows.sort(key=lambda r: (order.get(r.status, 5), r.node))
    healthy = len(answered) - sum(1 for r in rows if r.status != "no_answer")
    if healthy:
        rows = rows[:NODES_MAX_ROWS]
        rows.append(NodeHealthRow(node=f"{healthy} other node(s)", status="ok", why="every check within its "
                                  "threshold and like the other nodes"))
    return by_severity(findings), rows[: NODES_MAX_ROWS + 1], spread
