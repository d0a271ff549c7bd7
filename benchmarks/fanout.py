"""Cost of a job-level call (issue 8): `gpu-triage dump-stacks --slurm-job J` against the same collector run on
one node by hand, on a real Slurm cluster of emulated nodes on this machine (tests/cluster.py).

Part 1, 2 nodes: the fault lab's hung 4-rank gloo job (2 ranks a node). "Local" is the per-node collector as
srun would start it there (`gpu-triage dump-stacks --local --json` with that node's SLURM_JOB_ID and
SLURMD_NODENAME), timed per node; the job-level call must take at most 1.5x the slowest node's local run. The
job-level call is timed as an agent makes it (dump_stacks(slurm_job=J) on a running MCP server over stdio) and as
a shell user does (`gpu-triage dump-stacks --slurm-job J`, which adds one more interpreter start to the same work).
Part 2, growth: an 8-node cluster, a job of sleeping ranks (RANK/WORLD_SIZE set, 2 a node) on 1, 2, 4 and 8 nodes;
the job-level call's median per size, and the cost each extra node adds.

The emulated nodes share this machine's cores: every node's collector (a Python start, scontrol, py-spy) runs
on the same 2 CPUs, so the growth here is an upper bound of what separate nodes would see (each has its own CPUs;
what remains is srun's fan-out and the merge).
Usage: .venv/bin/python benchmarks/fanout.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402

from tests.cluster import SlurmCluster, free_port, slurm_cluster  # noqa: E402
from tests.helpers import base_env, stdio_client  # noqa: E402

LAB = REPO / "tests" / "lab" / "rank_conditional_allgather.py"
CLI = [sys.executable, "-m", "mcp_server.cli"]


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode == 3:
        raise SystemExit(f"{' '.join(argv[3:])} failed: {done.stderr.strip()}")
    return elapsed


def median_of(runs: int, argv: list[str], env: dict[str, str]) -> float:
    timed(argv, env)  # warm the file cache
    return statistics.median(timed(argv, env) for _ in range(runs))


async def mcp_median(runs: int, job: str, env: dict[str, str]) -> float:
    """Median wall time of dump_stacks(slurm_job=J) on one running server (after one warm-up call)."""
    times: list[float] = []
    async with stdio_client(env) as client:
        for run in range(runs + 1):
            started = time.perf_counter()
            result = await client.call_tool("dump_stacks", {"slurm_job": job})
            if result.is_error:
                raise SystemExit(f"dump_stacks(slurm_job={job}) failed: {getattr(result.content[0], 'text', '')}")
            if run:
                times.append(time.perf_counter() - started)
    return statistics.median(times)


def submit_and_wait(cluster: SlurmCluster, work: Path, body: str, *args: str, ready: Path, ranks: int) -> str:
    script = work / f"job{time.monotonic_ns()}.sh"
    script.write_text("#!/bin/bash\n" + body)
    job = cluster.submit(script, *args, output=work / f"{script.stem}.out")
    cluster.wait_running(job)
    deadline = time.monotonic() + 180
    while len(list(ready.glob("*"))) < ranks:
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job} did not get ready: {(work / f'{script.stem}.out').read_text()[-2000:]}")
        time.sleep(0.2)
    time.sleep(1.0)
    return job


def two_nodes(runs: int, work: Path) -> None:
    with slurm_cluster(work / "two") as cluster:
        logs = work / "lab_logs"
        job = submit_and_wait(cluster, work, f"""export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()} \\
  LAB_TIMEOUT_S=900 LAB_RANK_LOG_DIR={logs} OMP_NUM_THREADS=1
exec srun bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS exec {sys.executable} {LAB}'
""", "-N", "2", "--ntasks-per-node=2", ready=logs, ranks=4)
        time.sleep(8)  # past step 5: every rank in its hang
        env = dict(os.environ, **cluster.env, PYTHONPATH=str(REPO))
        local: dict[str, float] = {}
        for node in cluster.nodes:
            node_env = dict(env, SLURM_JOB_ID=job, SLURMD_NODENAME=node)
            local[node] = median_of(runs, [*CLI, "dump-stacks", "--local", "--json"], node_env)
        over_mcp = anyio.run(mcp_median, runs, job, base_env(**cluster.env))
        from_shell = median_of(runs, [*CLI, "dump-stacks", "--slurm-job", job, "--json"], env)
        slowest = max(local.values())
        print("== 2 emulated nodes, hung 4-rank gloo job (median of", runs, "runs) ==")
        for node, seconds in local.items():
            print(f"  local collector on {node} (gpu-triage dump-stacks --local): {seconds:.3f} s")
        print(f"  job-level over MCP, dump_stacks(slurm_job={job}): {over_mcp:.3f} s, "
              f"{over_mcp / slowest:.2f}x the slowest node's local collection (target <= 1.5x)")
        print(f"  job-level from the shell, gpu-triage dump-stacks --slurm-job {job}: {from_shell:.3f} s, "
              f"{from_shell / slowest:.2f}x (one more interpreter start than the collector)")


def growth(runs: int, work: Path) -> None:
    with slurm_cluster(work / "eight", nodes=8) as cluster:
        print("== growth: sleeping ranks (2 a node), dump_stacks(slurm_job=J) over MCP (median of", runs, "runs) ==")
        times: dict[int, float] = {}
        for nodes in (1, 2, 4, 8):
            ready = work / f"ready{nodes}"
            ready.mkdir()
            sleeper = work / "sleeper.py"
            sleeper.write_text("import os, pathlib, sys, time\n"
                               "pathlib.Path(sys.argv[1], os.environ['RANK']).touch()\ntime.sleep(900)\n")
            job = submit_and_wait(cluster, work, f"""exec srun bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS \\
  exec {sys.executable} {sleeper} {ready}'
""", "-N", str(nodes), "--ntasks-per-node=2", ready=ready, ranks=2 * nodes)
            times[nodes] = anyio.run(mcp_median, runs, job, base_env(**cluster.env))
            cluster.run("scancel", job)
            extra = ("" if nodes == 1 else
                     f", +{(times[nodes] - times[1]) / (nodes - 1) * 1000:.0f} ms per node beyond the first")
            print(f"  {nodes} node(s), {2 * nodes} ranks: {times[nodes]:.3f} s{extra}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    # SIGTERM ends the run through the context managers, so the cluster's daemons are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="gpu-triage-fanout-") as tmp:
        two_nodes(runs, Path(tmp))
        growth(runs, Path(tmp))


if __name__ == "__main__":
    main()
