"""telemetry_history with job=<id> on a real Slurm cluster (tests/cluster.py: munged, slurmctld, three slurmd on
loopback): the window and the nodes come from scontrol, and the series are narrowed to those nodes.

A short two-node job is submitted and left to finish; then a real Prometheus (Debian's 2.42) is backfilled with
dcgm-exporter series of all three nodes over the job's own minutes, without hpc_job labels (as on most clusters: the
exporter's --hpc-job-mapping-dir is not set up), and the CLI is called with the job id and SLURM_CONF only.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.cluster import SlurmCluster, slurm_cluster
from tests.helpers import base_env, run_cli
from tests.tools.telemetry.history import Gpu, Prometheus, Scenario, prometheus_available, write_families

STEP_S = 5


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm"), nodes=3, cpus_per_node=2) as running:
        yield running


def _finished_job(cluster: SlurmCluster, folder: Path) -> tuple[str, dict[str, str]]:
    script = folder / "job.sh"
    script.write_text("#!/bin/sh\nsleep 12\n")
    script.chmod(0o755)
    job = cluster.submit(script, "-N", "2", "-n", "2", output=folder / "job.out")
    deadline = time.monotonic() + 90
    while cluster.state(job) != "COMPLETED":
        assert cluster.state(job) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"), cluster.state(job)
        assert time.monotonic() < deadline, f"job {job} is still {cluster.state(job)}"
        time.sleep(0.5)
    shown = cluster.run("scontrol", "show", "job", "-o", job).stdout
    return job, dict(field.split("=", 1) for field in shown.split() if "=" in field)


def test_job_window_and_nodes_come_from_scontrol(cluster: SlurmCluster, tmp_path: Path) -> None:
    assert prometheus_available(), "prometheus and promtool are needed: scripts/test.sh installs Debian's package"
    job, fields = _finished_job(cluster, tmp_path)
    start = datetime.fromisoformat(fields["StartTime"]).astimezone().timestamp()  # Slurm's local time, no zone
    end = datetime.fromisoformat(fields["EndTime"]).astimezone().timestamp()
    job_nodes = cluster.run("scontrol", "show", "hostnames", fields["NodeList"]).stdout.split()
    assert len(job_nodes) == 2 and set(job_nodes) < set(cluster.nodes)
    other = next(n for n in cluster.nodes if n not in job_nodes)

    def values(gpu: Gpu, concept: str, t: int) -> float:
        return {"sm_clock": 1980, "gpu_util": 97, "gpu_temp": 66, "power": 680, "fb_used": 61000,
                "clock_reasons": 0, "xid": 0, "pcie_replay": 0}[concept]

    # Samples every 5 s from ten minutes before the job to now (none in the future), on every node of the cluster.
    first = int(start) - 600
    scenario = Scenario([Gpu(node, i, f"GPU-{n:02x}{i:02x}5b59-2c1e-1e63-0068-9178c4298abd",
                             f"00000000:{0x19 + 0x10 * i:02X}:00.0") for n, node in enumerate(cluster.nodes)
                         for i in range(2)], values, first - first % STEP_S, int(time.time()), interval=STEP_S)
    server = Prometheus(tmp_path / "prometheus", write_families([scenario]))
    try:
        done = run_cli(["telemetry-history", server.url, "--job", job, "--step-s", str(STEP_S), "--json"],
                       base_env(**cluster.env))
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["job"] == job and result["window_source"] == f"Slurm job {job} (scontrol)"
    assert result["window_start"] == iso(math.floor(start / STEP_S) * STEP_S)
    assert result["window_end"] == iso(end)
    assert result["nodes"] == job_nodes
    # Narrowed to the job's nodes: the third node's GPUs are not read.
    assert sorted({g["node"] for g in result["gpus"]}) == sorted(job_nodes) and len(result["gpus"]) == 4
    assert other not in {g["node"] for g in result["gpus"]}
    [shown] = [c for c in result["coverage"] if c["input"] == f"scontrol show job {job}"]
    assert shown["status"] == "read" and f"NodeList={fields['NodeList']}" in shown["detail"]
    assert "JobState=COMPLETED" in shown["detail"]
    assert any(f"no series carries hpc_job={job}" in note and "the job's nodes from scontrol" in note
               for note in result["notes"])
    assert result["severity"] == "ok" and result["findings"] == []
