"""dump_stacks and analyze_flight_recorder on a real hung job: the fault lab's rank-conditional all_gather.

A real 4-rank torchrun job (gloo on CPU, tests/lab/rank_conditional_allgather.py) hangs because rank 0 alone
calls dist.all_gather inside save_checkpoint() while ranks 1-3 wait in the DDP gradient all-reduce. While it
hangs: real py-spy against the live workers through the real MCP client, the flight-recorder dumps PyTorch
writes for it (pickle and JSON), and faulthandler stacks (SIGUSR1). The job is ended by the test: killed by
process group at the end of the module (its process-group timeout, 120 s, is the backstop).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import HANG_LAB, REPO, base_env, line_of, pid_alive, run_cli, stdio_client, structured

pytestmark = pytest.mark.anyio

LAB = HANG_LAB
ALL_GATHER_LINE = line_of(LAB, "dist.all_gather(gathered")
BACKWARD_LINE = line_of(LAB, "    loss.backward()")


@dataclass
class HungJob:
    dir: Path
    launcher: subprocess.Popen[bytes]
    workers: dict[int, int]  # rank -> pid
    fr_dir: Path
    fh_dir: Path


def _worker_ranks(launcher_pid: int) -> dict[int, int]:
    ranks = {}
    for child in psutil.Process(launcher_pid).children():
        env = child.environ()
        if "RANK" in env:
            ranks[int(env["RANK"])] = child.pid
    return ranks


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HungJob]:
    work = tmp_path_factory.mktemp("hung_job")
    fr_dir, fh_dir = work / "fr", work / "faulthandler"
    env = dict(os.environ, LAB_TIMEOUT_S="120", LAB_FR_DIR=str(fr_dir), LAB_FAULTHANDLER_DIR=str(fh_dir),
               LAB_RANK_LOG_DIR=str(work / "logs"), OMP_NUM_THREADS="1")
    with open(work / "combined.log", "wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                     "--nproc-per-node", "4", str(LAB)], cwd=work, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not all((fr_dir / f"rank_{r}").exists() and (fr_dir / "json" / f"rank_{r}.json").exists()
                      for r in range(4)):
            assert launcher.poll() is None, (work / "combined.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the lab job did not reach its hang within 120 s"
            time.sleep(0.2)
        time.sleep(0.3)  # the dump files are complete once the JSON (written second) exists
        workers = _worker_ranks(launcher.pid)
        assert sorted(workers) == [0, 1, 2, 3]
        yield HungJob(work, launcher, workers, fr_dir, fh_dir)
    finally:
        # torchrun starts each worker in a session of its own: kill them by pid, then the launcher's group.
        for child in psutil.Process(launcher.pid).children(recursive=True):
            child.kill()
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)



def _assert_rank0_is_the_suspect(data: dict[str, Any], *, file_suffix: str = "rank_conditional_allgather.py") -> None:
    assert [s["rank"] for s in data["suspects"]] == [0]
    suspect = data["suspects"][0]
    assert suspect["function"] == "save_checkpoint"
    assert suspect["location"].endswith(f"{file_suffix}:{ALL_GATHER_LINE} save_checkpoint")
    assert "rank-conditional" in suspect["reason"] and "all_gather" in suspect["reason"]
    groups = {tuple(g["ranks"]): g for g in data["groups"]}
    assert set(groups) == {(1, 2, 3), (0,)}
    assert groups[(0,)]["collective"] == "all_gather"
    assert groups[(1, 2, 3)]["collective"].startswith("all_reduce (DDP backward")
    assert groups[(1, 2, 3)]["location"].endswith(f":{BACKWARD_LINE} train_step")
    assert data["severity"] == "crit"
    assert "Rank 0 is at" in data["conclusion"][0] and "rank-conditional" in data["conclusion"][0]
    assert "move it out of the `if`" in data["conclusion"][1]  # the fix, following the kind
    assert [s["kind"] for s in data["suspects"]] == ["other_collective"]


async def test_dump_stacks_names_rank_0_through_the_mcp_client(hung_job: HungJob) -> None:
    async with stdio_client(base_env(), "--root", str(hung_job.dir)) as client:
        by_match = structured(await client.call_tool("dump_stacks", {"match": "rank_conditional_allgather"}))
        native = structured(await client.call_tool("dump_stacks", {"pid": list(hung_job.workers.values()),
                                                                    "native": True}))
    for data in (by_match, native):
        _assert_rank0_is_the_suspect(data)
        rows = {r["rank"]: r for r in data["ranks"]}
        assert {rank: rows[rank]["pid"] for rank in rows} == hung_job.workers  # the launcher is not a rank
        assert all(r["status"] == "ok" and r["state"] == "idle" for r in rows.values())
        assert rows[0]["innermost_user_frame"].endswith(f":{ALL_GATHER_LINE} save_checkpoint")
        assert data["world_size"] == 4
    # With native frames the wait is seen, not inferred: c10d's Reducer in backward.
    assert {r["collective"] for r in native["ranks"] if r["rank"] != 0} == {"all_reduce (DDP backward)"}
    assert {r["collective"] for r in by_match["ranks"] if r["rank"] != 0} == {
        "all_reduce (DDP backward, from the Python frames)"}


def test_cli_discovers_the_job_from_rank_variables(hung_job: HungJob) -> None:
    done = run_cli(["dump-stacks", "--json", "--root", str(hung_job.dir)], base_env())
    assert done.returncode == 2, done.stderr  # critical
    data = json.loads(done.stdout)
    _assert_rank0_is_the_suspect(data)
    assert {r["rank"]: r["pid"] for r in data["ranks"]} == hung_job.workers


def test_faulthandler_and_saved_pyspy_files_give_the_same_verdict(hung_job: HungJob) -> None:
    for pid in hung_job.workers.values():
        os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not all((hung_job.fh_dir / f"rank_{r}.txt").exists() and (hung_job.fh_dir / f"rank_{r}.txt").stat().st_size
                  for r in range(4)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    saved = hung_job.dir / "pyspy"
    saved.mkdir(exist_ok=True)
    for rank, pid in hung_job.workers.items():
        args = ["dump", "--pid", str(pid)] + (["--json"] if rank % 2 else [])  # text and JSON mixed
        dump = subprocess.run([str(Path(sysconfig.get_path("scripts")) / "py-spy"), *args], capture_output=True,
                              timeout=30)
        (saved / f"rank{rank}.{'json' if rank % 2 else 'txt'}").write_bytes(dump.stdout)
    for folder in (hung_job.fh_dir, saved):
        done = run_cli(["dump-stacks", "--from-files", str(folder), "--json", "--root", str(hung_job.dir)],
                       base_env())
        data = json.loads(done.stdout)
        _assert_rank0_is_the_suspect(data)
        assert [r["rank"] for r in data["ranks"]] == [0, 1, 2, 3]


async def test_flight_recorder_names_rank_0_and_seq_like_pytorch(hung_job: HungJob, tmp_path: Path) -> None:
    async with stdio_client(base_env(), "--root", str(hung_job.dir), "--root", str(tmp_path)) as client:
        pickles = structured(await client.call_tool("analyze_flight_recorder", {"path": str(hung_job.fr_dir)}))
        jsons = structured(await client.call_tool("analyze_flight_recorder",
                                                   {"path": str(hung_job.fr_dir / "json")}))
    for data in (pickles, jsons):
        (group,) = data["process_groups"]
        assert group["pg"] == "0" and group["desc"] == "default_pg" and group["ranks"] == "0-3"
        assert group["first_mismatch_seq"] == group["last_common_seq"] + 1
        assert group["expected_op"] == "all_reduce"
        assert [(s["rank"], s["reason"], s["op"]) for s in data["suspects"]] == [(0, "mismatched_op", "all_gather")]
        assert data["suspects"][0]["seq"] == group["first_mismatch_seq"]
    assert pickles["suspects"][0]["location"].endswith(f"allgather.py:{ALL_GATHER_LINE} save_checkpoint")
    assert jsons["suspects"][0]["location"] is None  # the JSON variant records no frames
    assert {r["format"] for r in pickles["ranks"]} == {"pickle"} and {r["format"] for r in jsons["ranks"]} == {"json"}

    # PyTorch's own analyzer on the same dumps. With gloo, torch 2.13 writes pg_config with empty names and the
    # analyzer dies on a KeyError; the copies below get the one field it needs (the group as the entries name it),
    # everything else is the real dump. It must name the same sequence number, op mismatch and culprit.
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    for rank in range(4):
        dump = pickle.loads((hung_job.fr_dir / f"rank_{rank}").read_bytes())  # our own job's file
        assert list(dump["pg_config"]) == [""]  # the gloo quirk this works around
        dump["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
        (fixed / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    official = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(fixed)],
                              capture_output=True, text=True, timeout=120)
    text = official.stdout + official.stderr
    seq = pickles["process_groups"][0]["first_mismatch_seq"]
    assert f"Collective sequence number: {seq} has errors" in text, text[-2000:]
    assert "COLLECTIVE_TYPE_MISMATCH" in text and "'all_reduce' does not match found collective type: 'all_gather'" \
        in text
    # The official culprit is relative to the rank file it reads first (directory order): rank 0, or ranks 1-3
    # when another rank's file comes first. We decide by majority: rank 0.
    assert {int(m) for m in re.findall(r"Culprit rank (\d+)", text)} in ({0}, {1, 2, 3})
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        ours_on_fixed = structured(await client.call_tool("analyze_flight_recorder", {"path": str(fixed)}))
    assert ours_on_fixed["suspects"] == pickles["suspects"]


def test_error_rows_for_gone_non_python_and_untraceable_pids(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    not_python = subprocess.Popen(["sleep", "60"])
    python = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        done = run_cli(["dump-stacks", "--pid", str(gone.pid), "--pid", str(not_python.pid), "--pid", str(python.pid),
                        "--json", "--root", str(tmp_path)], base_env())
        assert done.returncode == 1, done.stderr  # a warning: rows failed, no suspect
        rows = {r["pid"]: r for r in json.loads(done.stdout)["ranks"]}
        assert rows[gone.pid]["status"] == "gone" and "exited" in rows[gone.pid]["detail"]
        assert rows[not_python.pid]["status"] == "not_python"
        assert rows[python.pid]["status"] == "ok"
        assert rows[python.pid]["innermost_user_frame"] == "<string>:1 <module>"
        if os.geteuid() != 0:
            pytest.fail("the ptrace-denied row needs root to start a process as another user (nobody)")
        # An unprivileged user may not ptrace root's process: the row says how to fix it.
        denied = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                                 "mcp_server.cli", "dump-stacks", "--pid", str(python.pid), "--json", "--root",
                                 "/tmp"], env=base_env(HOME="/tmp"), cwd=REPO, capture_output=True, text=True,
                                timeout=60)
        assert denied.returncode == 1, denied.stderr
        row = json.loads(denied.stdout)["ranks"][0]
        assert row["status"] == "permission_denied"
        assert "SYS_PTRACE" in row["detail"] and "ptrace_scope" in row["detail"]
    finally:
        for process in (not_python, python):
            process.kill()
            process.wait()
    assert not pid_alive(python.pid)
