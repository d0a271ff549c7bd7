"""Job-level calls on a real Slurm cluster and over real SSH (tests/cluster.py starts both on loopback).

The job: the fault lab's rank-conditional all_gather (tests/lab/rank_conditional_allgather.py) as a 4-rank
gloo job submitted with sbatch over two emulated nodes, two ranks each (RANK from SLURM_PROCID). Rank 0 hangs in
all_gather inside save_checkpoint() while ranks 1-3 wait in the DDP all-reduce. One MCP call with its job id must
name rank 0, its node and its function; with one node's slurmd stopped (SIGSTOP: the node hangs), the call must
still end in bounded time, name that node as silent and diagnose the ranks of the other. health_check over the
job compares the nodes' GPUs; NVML is the allowed stand-in (tests/fakes/nvml), one recorded-format scenario per
node. The SSH backend runs against a real key-only sshd on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import SlurmCluster, Sshd, free_port, slurm_cluster, sshd
from tests.helpers import (
    HANG_LAB,
    REPO,
    base_env,
    h100,
    line_of,
    run_cli,
    stdio_client,
    structured,
    with_fake_nvml,
    with_fake_smi,
    write_scenario,
)

pytestmark = pytest.mark.anyio

LAB = HANG_LAB
ALL_GATHER_LINE = line_of(LAB, "dist.all_gather(gathered")
BACKWARD_LINE = line_of(LAB, "    loss.backward()")


@dataclass
class SlurmHang:
    cluster: SlurmCluster
    job: str
    dir: Path
    output: Path
    node_of_rank: dict[int, str]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


def _node_of_rank(cluster: SlurmCluster, job: str) -> dict[int, str]:
    """Slurm's own placement of the job's tasks (GLOBALID = the rank), read from each node's slurmd."""
    placed: dict[int, str] = {}
    for node in cluster.nodes:
        for line in cluster.run("scontrol", "listpids", f"{job}.0", node).stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) == 5 and parts[4].isdigit():
                placed[int(parts[4])] = node
    return placed


@pytest.fixture(scope="module")
def slurm_hang(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> SlurmHang:
    work = tmp_path_factory.mktemp("slurm_job")
    logs = work / "logs"
    script = work / "job.sh"
    # The user's job script (not our code): gloo rendezvous from Slurm's task ids.
    script.write_text(f"""#!/bin/bash
export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()} LAB_TIMEOUT_S=600 LAB_RANK_LOG_DIR={logs} OMP_NUM_THREADS=1
exec srun --kill-on-bad-exit=0 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID \\
  exec {sys.executable} {LAB}'
""")
    output = work / "job.out"
    job = cluster.submit(script, "-N", "2", "--ntasks-per-node=2", output=output)
    cluster.wait_running(job)
    deadline = time.monotonic() + 120

    def log(rank: int) -> str:
        path = logs / f"rank{rank}.log"
        return path.read_text() if path.exists() else ""

    while not ("saving checkpoint" in log(0) and all("step 5 loss" in log(r) for r in (1, 2, 3))):
        assert cluster.state(job) == "RUNNING", output.read_text()[-3000:] if output.exists() else "no output"
        assert time.monotonic() < deadline, "the Slurm lab job did not reach its hang within 120 s"
        time.sleep(0.2)
    time.sleep(1.0)  # ranks 1-3 enter step 6's all-reduce within milliseconds of logging step 5
    placed = _node_of_rank(cluster, job)
    assert sorted(placed) == [0, 1, 2, 3] and len(set(placed.values())) == 2, placed
    return SlurmHang(cluster, job, work, output, placed)



def _error(result: Any) -> str:
    assert result.is_error is True, result.structured_content
    text: str = result.content[0].text
    assert "Traceback" not in text
    return text


async def test_slurm_job_hang_is_diagnosed_from_one_mcp_call(slurm_hang: SlurmHang) -> None:
    env = base_env(**slurm_hang.cluster.env)
    async with stdio_client(env, "--root", str(slurm_hang.dir)) as client:
        data = structured(await client.call_tool("dump_stacks", {"slurm_job": slurm_hang.job}))
    node0 = slurm_hang.node_of_rank[0]
    assert [(s["rank"], s["node"], s["function"]) for s in data["suspects"]] == [(0, node0, "save_checkpoint")]
    assert data["suspects"][0]["location"].endswith(f"rank_conditional_allgather.py:{ALL_GATHER_LINE} "
                                                   "save_checkpoint")
    assert "rank-conditional" in data["suspects"][0]["reason"]
    groups = {tuple(g["ranks"]): g for g in data["groups"]}
    assert set(groups) == {(1, 2, 3), (0,)}
    assert groups[(1, 2, 3)]["collective"].startswith("all_reduce (DDP backward")
    assert groups[(1, 2, 3)]["location"].endswith(f":{BACKWARD_LINE} train_step")
    # Every rank once, on the node Slurm placed it on: no rank seen twice although the nodes share one machine.
    assert {r["rank"]: r["node"] for r in data["ranks"]} == slurm_hang.node_of_rank
    assert (data["nodes_answered"], data["nodes_failed"], data["world_size"]) == (2, 0, 4)
    assert data["severity"] == "crit"
    assert data["conclusion"][0].startswith(f"Rank 0 on {node0} is at ")
    # The job's output file, from scontrol, is the next thing to read.
    assert any(str(slurm_hang.output.relative_to(slurm_hang.dir)) in step["action"]  # relative to the root
               and step["action"].startswith("diagnose_logs")
               for step in data["next_steps"])


async def test_a_node_that_does_not_answer_is_a_row_and_the_rest_is_diagnosed(slurm_hang: SlurmHang) -> None:
    cluster = slurm_hang.cluster
    silent = slurm_hang.node_of_rank[0]
    other_ranks = sorted(r for r, n in slurm_hang.node_of_rank.items() if n != silent)
    env = base_env(**cluster.env)
    pid = cluster.slurmd_pid(silent)
    os.kill(pid, signal.SIGSTOP)  # the node hangs: its slurmd accepts connections and never answers
    try:
        async with stdio_client(env, "--root", str(slurm_hang.dir)) as client:
            started = time.monotonic()
            data = structured(await client.call_tool("dump_stacks", {"slurm_job": slurm_hang.job,
                                                                      "node_timeout_s": 2}))
            elapsed = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    # Bounded: the node timeout, the launcher margin (3 s) and srun's own exit, not srun's 10-20 s message timeout.
    assert elapsed < 9, elapsed
    unreachable = [r for r in data["ranks"] if r["status"] == "node_unreachable"]
    assert [(r["node"], r["detail"]) for r in unreachable] == [
        (silent, "no answer within 5 s (node hung, overloaded or unreachable)")]
    assert (data["nodes_answered"], data["nodes_failed"]) == (1, 1)
    assert [g["ranks"] for g in data["groups"]] == [other_ranks]
    assert data["groups"][0]["collective"].startswith("all_reduce (DDP backward")
    assert data["suspects"] == []
    assert data["severity"] == "warn"
    assert data["conclusion"][0] == (f"1 node(s) gave no answer ({silent}: no answer within 5 s (node hung, "
                                     "overloaded or unreachable)): ranks 0-1 are not in this verdict.")


def test_job_health_names_the_node_that_stands_out(slurm_hang: SlurmHang, tmp_path: Path) -> None:
    cluster = slurm_hang.cluster
    hot = cluster.nodes[1]
    for node in cluster.nodes:
        gpus = [h100(), h100(bus_id="00000000:2A:00.0")]
        if node == hot:  # GPU 1 of this node hot and thermally throttled (NVML's clocks-event bits 0x20, 0x40)
            gpus[1] = h100(bus_id="00000000:2A:00.0", temperature=89, sm_clock=1250, throttle_mask=0x60,
                           power_w=380.0)
        write_scenario(tmp_path / f"nvml_{node}.json", gpus)
    env = with_fake_nvml(base_env(**cluster.env), tmp_path / "nvml_{node}.json")
    done = run_cli(["health-check", "--slurm-job", slurm_hang.job, "--top-processes", "2", "--json",
                    "--root", str(tmp_path)], env)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    rows = {r["node"]: r for r in data["nodes"]}
    cool = cluster.nodes[0]
    # The host part is real (psutil on this shared machine, the same for both emulated nodes): a busy CI box can
    # give both nodes a CPU-load row, so only the GPUs, which differ, are asserted on.
    assert set(rows) in ({hot, "1 other node(s)"}, {hot, cool})
    assert "GPU" not in rows.get(cool, {"why": ""})["why"]
    assert rows[hot]["status"] == "crit" and rows[hot]["gpus"] == 2
    assert "GPU SM clock, median % of max 82% vs 100% on the others" in rows[hot]["why"]
    assert "GPU temperature, max 89C vs 62C on the others" in rows[hot]["why"]
    checks = [f["check"] for f in data["findings"]]
    assert checks[0] == f"{hot}: GPU 1 clock throttle"
    assert f"{hot}: GPU SM clock, median % of max vs the other nodes" in checks
    assert not any(c.startswith(f"{cool}: GPU") for c in checks)
    spread = {r["measure"]: r for r in data["node_spread"]}
    assert spread["GPU temperature, max (C)"] == {"measure": "GPU temperature, max (C)", "nodes": 2, "min": 62.0,
                                                  "median": 75.5, "max": 89.0, "worst_node": hot}
    assert data["conclusion"][0] == f"Slurm job {slurm_hang.job}: 2 of 2 nodes answered."
    assert data["host"] is None and data["gpus"] == []


def test_gpu_activity_of_every_node_names_the_gpu_below_its_node(slurm_hang: SlurmHang, tmp_path: Path) -> None:
    cluster = slurm_hang.cluster
    slow = cluster.nodes[1]
    busy = {"1": 99.0, "2": 85.0, "3": 30.0, "5": 40.0, "10": 35.0, "12": 10.0, "13": 5.0}
    for node in cluster.nodes:  # GPM values as NVML gives them (percent), in the NVML stand-in per node
        gpus = [h100(bus_id=f"00000000:{18 + i:02X}:00.0", gpm=busy) for i in range(4)]
        if node == slow:
            gpus[2] = h100(bus_id="00000000:1A:00.0", gpm=dict(busy, **{"2": 35.0, "5": 10.0}))
        write_scenario(tmp_path / f"nvml_{node}.json", gpus)
    env = with_fake_nvml(base_env(**cluster.env), tmp_path / "nvml_{node}.json")
    done = run_cli(["gpu-activity", "--slurm-job", slurm_hang.job, "--samples", "1", "--interval-s", "0.2", "--json",
                    "--root", str(tmp_path)], env)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    assert data["conclusion"][0] == f"Slurm job {slurm_hang.job}: 2 of 2 nodes answered."
    assert sorted({g["host"] for g in data["gpus"]}) == sorted(cluster.nodes) and len(data["gpus"]) == 8
    below = [f for f in data["findings"] if f["kind"] == "gpu_below_node"]
    assert [f["gpu"] for f in below] == [f"{slow} GPU 2"]
    assert "SM active 0.35 against its node's median 0.85 over 4 GPUs" in below[0]["evidence"]
    # The same GPU is busy by utilization.gpu yet its SMs are not: the small-kernel verdict too, and only there.
    assert {f["gpu"] for f in data["findings"] if f["kind"] == "low_sm_activity"} == {f"{slow} GPU 2"}

async def test_job_level_bad_inputs_are_refused_and_the_server_keeps_serving(
        slurm_hang: SlurmHang, tmp_path: Path) -> None:
    cluster = slurm_hang.cluster
    (tmp_path / "true.sh").write_text("#!/bin/bash\ntrue\n")
    finished = cluster.submit(tmp_path / "true.sh", output=tmp_path / "true.out")
    deadline = time.monotonic() + 30
    while cluster.state(finished) != "COMPLETED":
        assert time.monotonic() < deadline, cluster.state(finished)
        time.sleep(0.2)
    marker = tmp_path / "injected"
    async with stdio_client(base_env(**cluster.env), "--root", str(tmp_path)) as client:
        missing = _error(await client.call_tool("dump_stacks", {"slurm_job": "999999"}))
        ended = _error(await client.call_tool("dump_stacks", {"slurm_job": finished}))
        shell = _error(await client.call_tool("dump_stacks", {"slurm_job": "1;reboot"}))
        option = _error(await client.call_tool("dump_stacks", {"hosts": [f"-oProxyCommand=touch {marker}"]}))
        both = _error(await client.call_tool("dump_stacks", {"slurm_job": slurm_hang.job, "pid": [1]}))
        collector = _error(await client.call_tool("health_check", {"slurm_job": slurm_hang.job, "local": True}))
        pids = _error(await client.call_tool("health_check", {"slurm_job": slurm_hang.job, "job_pids": [1]}))
        still = await client.call_tool("triage_plan", {"symptom": "job hangs"})
    elsewhere = base_env(**cluster.env, GPU_TRIAGE_REMOTE_PYTHON="/opt/nowhere/bin/python3")
    async with stdio_client(elsewhere, "--root", str(tmp_path)) as client:
        no_python = structured(await client.call_tool("dump_stacks", {"slurm_job": slurm_hang.job}))
    assert "Slurm has no job 999999" in missing and "squeue" in missing
    assert f"Slurm job {finished} is COMPLETED, not RUNNING" in ended and "diagnose_logs" in ended
    assert "slurm_job" in shell and "pattern" in shell.lower()
    assert "is not a host name" in option
    assert "each node finds the job's ranks itself" in both
    assert "local (collector mode) is for one node; it cannot be combined with slurm_job" in collector
    assert "job_pids are pids of one node" in pids
    assert not marker.exists()
    assert still.is_error is False
    assert {r["node"]: r["status"] for r in no_python["ranks"]} == dict.fromkeys(cluster.nodes, "node_unreachable")
    assert no_python["conclusion"][1] == ("No node answered, so there is no verdict on the job: fix what the rows "
                                          "say, then call again.")
    assert all(r["detail"].startswith(f"the collector failed: slurmstepd-{r['node']}: error: execve(): "
                                      "/opt/nowhere/bin/python3: No such file or directory") and
               "set the server's --remote-python" in r["detail"] for r in no_python["ranks"])


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with sshd(tmp_path_factory.mktemp("sshd")) as running:
        yield running


async def test_ssh_backend_against_a_real_sshd(slurm_hang: SlurmHang, ssh_server: Sshd, tmp_path: Path) -> None:
    # The hung job's ranks run on this machine, so the host 127.0.0.1 holds all four of them.
    closed = free_port()
    env = base_env(GPU_TRIAGE_SSH_CONFIG=str(ssh_server.config))
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# MPI-style hostfile\n127.0.0.1:{ssh_server.port} slots=4\nnobody@127.0.0.1:"
                        f"{ssh_server.port} slots=4\n127.0.0.1:{closed}\n")
    async with stdio_client(env, "--root", str(tmp_path)) as client:
        data = structured(await client.call_tool("dump_stacks", {"hostfile": str(hostfile),
                                                                  "node_timeout_s": 10}))
        health = structured(await client.call_tool("health_check", {"hosts": [f"127.0.0.1:{ssh_server.port}"],
                                                                     "top_processes": 2}))
    here = f"127.0.0.1:{ssh_server.port}"
    assert [(s["rank"], s["node"], s["function"]) for s in data["suspects"]] == [(0, here, "save_checkpoint")]
    assert sorted(r["rank"] for r in data["ranks"] if r["status"] == "ok") == [0, 1, 2, 3]
    failed = {r["node"]: r["detail"] for r in data["ranks"] if r["status"] == "node_unreachable"}
    assert set(failed) == {f"127.0.0.1:{closed}", f"nobody@{here}"}
    assert failed[f"127.0.0.1:{closed}"].startswith("ssh could not connect (") and "refused" in failed[
        f"127.0.0.1:{closed}"]
    assert failed[f"nobody@{here}"].startswith("ssh refused the login (") and "install a key" in failed[
        f"nobody@{here}"]
    assert (data["nodes_answered"], data["nodes_failed"]) == (1, 2)
    # health over SSH: sshd gives the command a clean environment, so no NVML stand-in reaches it: host part only.
    assert health["conclusion"][0] == "1 host(s) over SSH: 1 of 1 nodes answered."
    spread = {r["measure"]: r for r in health["node_spread"]}
    assert set(spread) == {"host load per core", "host memory available (%)"}
    assert spread["host memory available (%)"]["nodes"] == 1 and 0 < spread["host memory available (%)"]["max"] < 100
    assert health["host"] is None and health["gpus"] == []
    # A node without our interpreter at that path: the row says which setting fixes it.
    elsewhere = dict(env, GPU_TRIAGE_REMOTE_PYTHON="/opt/nowhere/bin/python3")
    async with stdio_client(elsewhere, "--root", str(tmp_path)) as client:
        missing = structured(await client.call_tool("dump_stacks", {"hosts": [here]}))
    assert [(r["node"], r["status"]) for r in missing["ranks"]] == [(here, "node_unreachable")]
    assert missing["ranks"][0]["detail"].startswith("the collector failed: ")
    assert "set the server's --remote-python (GPU_TRIAGE_REMOTE_PYTHON)" in missing["ranks"][0]["detail"]


def test_report_for_a_slurm_job(slurm_hang: SlurmHang) -> None:
    # The job's own output file (from scontrol) is read as its log: it lies inside the root given here.
    done = run_cli(["report", "--slurm-job", slurm_hang.job, "--json", "--root", str(slurm_hang.dir)],
                   base_env(**slurm_hang.cluster.env))
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    ran = {r["tool"]: r for r in data["runs"]}
    assert set(ran) == {"health_check", "diagnose_logs", "dump_stacks"}
    assert all(r["severity"] is not None for r in ran.values()), ran
    assert ran["health_check"]["conclusion"].startswith(f"Slurm job {slurm_hang.job}: 2 of 2 nodes answered.")
    first = data["rows"][0]
    # The lab's rank 0 calls all_gather where the others wait in another collective: dump_stacks' class says so.
    assert first["symptom"] == f"other_collective: rank 0 on {slurm_hang.node_of_rank[0]} not where the others are"
    assert first["evidence"] == f"rank 0 in save_checkpoint at rank_conditional_allgather.py:{ALL_GATHER_LINE} " \
                                "save_checkpoint"


def test_health_of_64_nodes_stays_within_the_budget(tmp_path: Path) -> None:
    # One real collector answer (the NVML stand-in with 8 H100s), copied to 64 nodes; node17's GPUs run 300 MHz
    # slower. The merge must name node17, fold the other 63 into one row, and fit the default 8 KiB.
    from mcp_server.render import fit_to_budget, render_markdown
    from tools.gpu.health import HealthCheckResult, _merge_nodes

    write_scenario(tmp_path / "nvml.json", [h100(bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(8)])
    done = run_cli(["health-check", "--local", "--json", "--top-processes", "3", "--no-include-kernel-log",
                    "--root", str(tmp_path)], with_fake_nvml(base_env(), tmp_path / "nvml.json"))
    assert done.returncode in (0, 1), done.stderr
    answer = json.loads(done.stdout)
    documents: dict[str, HealthCheckResult | str] = {}
    for k in range(64):
        document = json.loads(json.dumps(answer))
        document["findings"] = [f for f in document["findings"] if "GPU" in f["check"]]  # this box's own load out
        if k == 17:
            for gpu in document["gpus"]:
                gpu["sm_clock_mhz"] = 1680
        documents[f"node{k:02d}"] = HealthCheckResult.model_validate(document)
    documents["node63"] = "no answer within 23 s (node hung, overloaded or unreachable)"
    result = _merge_nodes("Slurm job 7", documents)
    assert [(r.node, r.status) for r in result.nodes] == [("node63", "no_answer"), ("node17", "stands_out"),
                                                          ("62 other node(s)", "ok")]
    assert result.nodes[1].why == "GPU SM clock, median % of max 85% vs 100% on the others"
    spread = {r.measure: r for r in result.node_spread}
    assert (spread["GPU SM clock, median % of max (%)"].nodes, spread["GPU SM clock, median % of max (%)"].worst_node,
            spread["GPU SM clock, median % of max (%)"].min) == (63, "node17", 84.85)
    assert result.conclusion[0] == "Slurm job 7: 63 of 64 nodes answered."
    text = render_markdown(fit_to_budget(result, "health", 8192), "health")
    assert len(text.encode()) <= 8192 and "node17" in text and "62 other node(s)" in text


def test_stacks_of_64_nodes_name_the_odd_rank_within_the_budget() -> None:
    # One real collector answer (the recorded hang's ranks 0 and 1, read by `dump-stacks --local`), copied to 64
    # nodes of 8 ranks: every rank stands where rank 1 stood, except rank 40 on node05, which stands where rank 0
    # did. The merge must name rank 40 on node05 and fit 512 ranks into the default 8 KiB.
    from mcp_server.render import fit_to_budget, render_markdown
    from tools.hangs.stacks import DumpStacksResult, merge_nodes

    stacks = REPO / "tests" / "data" / "stacks" / "rank_conditional_allgather" / "pyspy_json"
    done = run_cli(["dump-stacks", "--local", "--json", "--max-bytes", "262144", "--from-files",
                    str(stacks / "rank0.json"), str(stacks / "rank1.json")], base_env(SLURMD_NODENAME="model"))
    answer = DumpStacksResult.model_validate_json(done.stdout)
    odd, waiting = (next(r for r in answer.ranks if r.rank == k) for k in (0, 1))
    per_node: dict[str, DumpStacksResult | str] = {}
    for k in range(64):
        rows = [(odd if 8 * k + i == 40 else waiting).model_copy(update={"rank": 8 * k + i, "pid": 1000 + 8 * k + i,
                                                                          "node": f"node{k:02d}"}) for i in range(8)]
        per_node[f"node{k:02d}"] = answer.model_copy(update={"ranks": rows, "world_size": 512})
    result = merge_nodes(per_node)
    assert [(s.rank, s.node, s.function) for s in result.suspects] == [(40, "node05", "save_checkpoint")]
    assert [len(g.ranks) for g in result.groups] == [511, 1]
    text = render_markdown(fit_to_budget(result, "stacks", 8192), "stacks")
    assert len(text.encode()) <= 8192
    assert "Rank 40 on node05 is at" in text and "| 40 | node05 |" in text


def test_a_login_banner_before_the_collectors_answer_is_skipped() -> None:
    # Over SSH the remote user's shell runs first; a .bashrc that echoes puts text before our one-line document.
    from tools.cluster.nodes import _decode_document

    document = json.dumps({"node": "gpu-07", "ranks": []})
    assert _decode_document(f"Welcome to gpu-07\n{{maintenance on Friday}}\n{document}\n".encode()) == {
        "node": "gpu-07", "ranks": []}
    assert _decode_document(b"") == "the collector printed nothing"
    assert _decode_document(b"Traceback (most recent call last):\n  boom") == (
        "the collector's output is not JSON (starts 'Traceback (most recent call last):\\n  boom')")
    assert _decode_document(b"[1, 2]") == "the collector's output is not a JSON object"


async def test_straggler_in_a_slurm_job_gets_its_own_gpu_checked(cluster: SlurmCluster, tmp_path: Path) -> None:
    # The fault lab's straggler (rank 2 computes 30 ms longer a step) as a live 4-rank Slurm job, 2 ranks a node.
    # find_stragglers reads the ranks' logs, flags rank 2, and with slurm_job reads rank 2's own GPU on its node:
    # that node's NVML stand-in has GPU 0 (LOCAL_RANK 0 there) hot and thermally throttled; node1's GPUs are fine.
    logs = tmp_path / "logs"
    script = tmp_path / "straggler.sh"
    script.write_text(f"""#!/bin/bash
export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()} LAB_STEPS=100000 LAB_RANK_LOG_DIR={logs} OMP_NUM_THREADS=1
exec srun --kill-on-bad-exit=0 bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID \\
  exec {sys.executable} {REPO / "tests" / "lab" / "straggler_steps.py"}'
""")
    job = cluster.submit(script, "-N", "2", "--ntasks-per-node=2", output=tmp_path / "straggler.out")
    try:
        cluster.wait_running(job)
        deadline = time.monotonic() + 120
        while not all((logs / f"rank{r}.log").exists() and (logs / f"rank{r}.log").read_text().count(" step ") >= 40
                      for r in range(4)):
            assert cluster.state(job) == "RUNNING" and time.monotonic() < deadline, "the straggler job did not log"
            time.sleep(0.5)
        placed = _node_of_rank(cluster, job)  # now that every rank runs (and logs)
        assert sorted(placed) == [0, 1, 2, 3], placed
        for node in cluster.nodes:
            gpus = [h100(), h100(bus_id="00000000:2A:00.0")]
            if node == placed[2]:
                gpus[0] = h100(temperature=91, sm_clock=1200, throttle_mask=0x60)
            write_scenario(tmp_path / f"nvml_{node}.json", gpus)
        env = with_fake_nvml(base_env(**cluster.env), tmp_path / "nvml_{node}.json")
        async with stdio_client(env, "--root", str(tmp_path)) as client:
            data = structured(await client.call_tool("find_stragglers", {"logs": ["logs/rank*.log"],
                                                                         "slurm_job": job}))
    finally:
        cluster.run("scancel", job)
    assert [(f["rank"], f["kind"], f["node"], f["gpu"]) for f in data["flagged"]] == [
        (2, "compute_slow", placed[2], 0)]
    crit = {h["check"]: h["value"] for h in data["hardware"] if h["severity"] == "crit"}
    assert crit == {f"rank 2 on {placed[2]}: GPU 0 temperature": "91 C",
                    f"rank 2 on {placed[2]}: GPU 0 clock throttle": "sw_thermal_slowdown,hw_thermal_slowdown"}
    assert all("GPU 1" not in h["check"] for h in data["hardware"])  # only rank 2's own GPU is judged
    assert data["severity"] == "crit"
    assert data["conclusion"][-1].startswith(f"Its GPU: rank 2 on {placed[2]}: GPU 0 ")


def test_interconnect_of_every_node_of_the_job(slurm_hang: SlurmHang, tmp_path: Path) -> None:
    # Each emulated node replays its own nvidia-smi topo -m (the allowed stand-in): a real H100 board's capture
    # (tests/data/interconnect/wild) on one node, and on the other the same capture with the GPU2-GPU5 pair's cells
    # at NV12, as a board that lost six of that pair's links prints it. ibstat runs for real (no IB device).
    cluster = slurm_hang.cluster
    healthy, degraded = cluster.nodes
    real = (REPO / "tests" / "data" / "interconnect" / "wild" / "topo__stas00-ml-engineering-4.txt").read_text()
    (tmp_path / f"topo_{healthy}.txt").write_text(real)
    rows = real.splitlines()
    for i, j in ((2, 5), (5, 2)):  # the GPU2 row's GPU5 cell and the GPU5 row's GPU2 cell, spacing kept
        row = next(n for n, line in enumerate(rows) if line.startswith(f"GPU{i} "))
        cell = list(re.finditer(r"\S+", rows[row]))[1 + j]
        assert cell.group(0) == "NV18"
        rows[row] = rows[row][: cell.start()] + "NV12" + rows[row][cell.end():]
    (tmp_path / f"topo_{degraded}.txt").write_text("\n".join(rows) + "\n")
    env = with_fake_smi(base_env(**cluster.env), "capture:none")
    env["FAKE_SMI_TOPO"] = str(tmp_path / "topo_{node}.txt")
    env["PATH"] += ":/usr/sbin"
    done = run_cli(["check-interconnect", "--slurm-job", slurm_hang.job, "--json", "--root", str(tmp_path)], env)
    assert done.returncode == 1, done.stderr  # fewer NVLinks on a pair: a warning (none at all would be critical)
    data = json.loads(done.stdout)
    topo = [f for f in data["findings"] if f["kind"] == "topo_degraded"]
    assert [(f["node"], f["evidence"].split(" is ")[0]) for f in topo] == [(degraded, "GPU2-GPU5")]
    pairs = {link["node"]: link["state"] for link in data["links"] if link["name"] == "28 GPU pairs"}
    assert pairs == {healthy: "NV18", degraded: "NV18"}
    assert any(note.startswith(f"{healthy}: ibstat: no output") for note in data["notes"]), data["notes"]


async def test_host_side_of_every_node_of_the_job(slurm_hang: SlurmHang) -> None:
    """profile_cpu and sample_host with the job id: each node records and samples its own two ranks; the hung
    ranks wait in gloo (native code, no CPU), which is no CPU bottleneck on either node."""
    cluster = slurm_hang.cluster
    env = base_env(**cluster.env)
    said: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        said.append(message or "")

    async with stdio_client(env, "--root", str(slurm_hang.dir)) as client:
        profiled = structured(await client.call_tool("profile_cpu", {"slurm_job": slurm_hang.job, "duration_s": 2},
                                                     progress_callback=on_progress))
        sampled = structured(await client.call_tool("sample_host", {"slurm_job": slurm_hang.job, "duration_s": 2}))
    nodes = sorted(set(slurm_hang.node_of_rank.values()))
    for data in (profiled, sampled):
        assert sorted(n["node"] for n in data["nodes"]) == nodes, data["nodes"]
        assert all(n["verdict"] != "no_answer" for n in data["nodes"]), data["nodes"]
        assert data["conclusion"][0].startswith(f"Slurm job {slurm_hang.job}") and "2 of 2 node(s)" in \
            data["conclusion"][0], data["conclusion"]
    # The job-level call says what it waits for while the nodes record.
    assert said and said[0] == f"Slurm job {slurm_hang.job}: profile-cpu on every node (each within 20 s)", said
    trainers = [p for p in profiled["processes"] if p["role"] == "trainer"]
    assert sorted(p["node"] for p in trainers) == sorted(slurm_hang.node_of_rank.values()), trainers
    assert profiled["verdict"] == "none", profiled["findings"]
    assert any("waits (a collective" in note for note in profiled["notes"]), profiled["notes"]
    ranks = [p for p in sampled["processes"] if p["role"] == "trainer"]
    assert sorted(p["node"] for p in ranks) == sorted(slurm_hang.node_of_rank.values()), sampled["processes"]
    assert all(p["cpu_pct"] < 50 for p in ranks)  # blocked in the collective
