"""profile_cpu on real processes: the lab's CPU-bound training loops (tests/lab/cpu_bound.py, CPU torch) recorded
by the real py-spy through the real MCP server, py-spy's own raw and speedscope files read back, and bad inputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from tests.helpers import REPO, base_env, line_of, pid_alive, stdio_client, structured
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.host import ProfileCpuInput, ProfileCpuResult, profile_cpu

LAB = REPO / "tests" / "lab" / "cpu_bound.py"
TRANSFORM_LINE = line_of(LAB, "acc += (index * 31 + i) % 7 * 0.5")
BOOKKEEPING_LINE = line_of(LAB, "values = [((step * 13 + i) % 97) / 97")
SLOW_READ_LINE = line_of(LAB, "time.sleep(0.025)")
PY_SPY = str(Path(sys.executable).with_name("py-spy"))


@contextmanager
def lab_job(mode: str, tmp_path: Path) -> Iterator[int]:
    """The lab loop running in its own process group, past its first steps; killed with its workers after."""
    ready = tmp_path / f"ready-{mode}"
    process = subprocess.Popen([sys.executable, str(LAB), mode, str(ready)], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert process.poll() is None, f"the lab job {mode} exited"
            assert time.monotonic() < deadline, f"the lab job {mode} never got past its first steps"
            time.sleep(0.2)
        yield process.pid
        # Never left stopped by the recording.
        assert psutil.Process(process.pid).status() != psutil.STATUS_STOPPED
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def profile(root: Path, **arguments: Any) -> ProfileCpuResult:
    return anyio.run(profile_cpu, ProfileCpuInput(**arguments), ToolContext(roots=(root.resolve(),)))


@pytest.mark.anyio
async def test_each_lab_job_gets_its_verdict_and_function_through_mcp(tmp_path: Path) -> None:
    found: dict[str, dict[str, Any]] = {}
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        for mode in ("workers0", "workers2", "python_loop", "slow_storage", "gil_threads"):
            with lab_job(mode, tmp_path) as pid:
                found[mode] = structured(await client.call_tool("profile_cpu", {"pid": [pid], "duration_s": 3}))
    for mode in ("workers0", "workers2"):
        data = found[mode]
        assert data["verdict"] == "input_bound_cpu", (mode, data["findings"])
        assert f"heavy_transform (cpu_bound.py:{TRANSFORM_LINE})" in data["findings"][0]["evidence"], data
    assert "loads the data itself (num_workers=0)" in found["workers0"]["findings"][0]["evidence"]
    workers = [p for p in found["workers2"]["processes"] if p["role"] == "dataloader_worker"]
    assert len(workers) == 2 and all(p["idle_pct"] < 30 for p in workers)
    assert all(p["top"][0]["function"] == "heavy_transform" and p["top"][0]["file"] == "cpu_bound.py"
               for p in workers)
    trainer = next(p for p in found["workers2"]["processes"] if p["role"] == "trainer")
    assert trainer["idle_pct"] > 60  # it waits on the input queue: seen only because py-spy ran with --idle
    loop = found["python_loop"]
    assert loop["verdict"] == "main_loop_cpu_bound", loop["findings"]
    assert "python_bookkeeping" in loop["findings"][0]["evidence"]
    assert f"cpu_bound.py:{BOOKKEEPING_LINE})" in loop["findings"][0]["evidence"]
    slow = found["slow_storage"]
    assert slow["verdict"] == "input_bound_io", slow["findings"]
    assert f"SlowFile.read (cpu_bound.py:{SLOW_READ_LINE})" in slow["findings"][0]["evidence"]
    assert "storage" in slow["findings"][0]["fix"]
    gil = found["gil_threads"]
    assert gil["verdict"] == "gil_contention", gil["findings"]
    evidence = gil["findings"][0]["evidence"]
    assert evidence.startswith("3 threads of pid") and "background_metrics" in evidence, evidence
    assert "python_bookkeeping" in evidence and "GIL" in evidence


def test_threads_that_run_in_parallel_are_no_gil_contention() -> None:
    """The rule on its two sides: three Python threads busy in every sample are contention when their process
    used one core, and parallel work (code that releases the GIL) when it used three."""
    from collections import Counter

    from tools.host.profile import _analyse
    from tools.host.pyspy_record import Frame, ThreadSamples

    stack = (Frame("main", "train.py", 10), Frame("tokenise", "train.py", 40))
    threads = [ThreadSamples(pid=7, command="python train.py", thread=name, stacks=Counter({stack: 100}))
               for name in ("MainThread", "Thread-1", "Thread-2")]
    assert _analyse(threads, [], {7: 1.0}).verdict == "gil_contention"
    assert _analyse(threads, [], {7: 2.9}).verdict == "main_loop_cpu_bound"
    assert _analyse(threads, [], None).verdict == "main_loop_cpu_bound"  # a saved file has no CPU time


def test_saved_raw_and_speedscope_files_read_alike(tmp_path: Path) -> None:
    with lab_job("workers2", tmp_path) as pid:
        for fmt, name in (("raw", "rec.txt"), ("speedscope", "rec.json")):
            subprocess.run([PY_SPY, "record", "--pid", str(pid), "--duration", "2", "--format", fmt, "--output",
                            str(tmp_path / name), "--idle", "--subprocesses", "--threads"], check=True,
                           capture_output=True, timeout=60)
    for name in ("rec.txt", "rec.json"):
        result = profile(tmp_path, from_files=[name])
        assert result.verdict == "input_bound_cpu", (name, result.findings)
        assert f"heavy_transform (cpu_bound.py:{TRANSFORM_LINE})" in result.findings[0].evidence


def test_public_speedscope_files_get_their_readers_verdicts() -> None:
    """Two real py-spy files from public repositories (tests/data/host/pyspy/PROVENANCE.md), labelled by a reader."""
    folder = REPO / "tests" / "data" / "host" / "pyspy"
    # CS336 BPE training, py-spy 0.4.2 on macOS: the main thread has no name, waits in Pool.join on its workers.
    bpe = profile(folder, from_files=["bpe_train__cs336-assignment1-basics.json"])
    assert bpe.verdict == "none" and bpe.findings == []
    main = next(p for p in bpe.processes if p.role == "trainer")
    assert (main.threads, main.samples, main.idle_pct) == (1, 3807, 83.7)
    # A video overlay whose code is an installed package: the time is named in that package, not only the entry.
    overlay = profile(folder, from_files=["overlay__Goproverlay.json"])
    assert overlay.verdict == "main_loop_cpu_bound"
    assert "hottest function read_frame (site-packages/moviepy/video/io/ffmpeg_reader.py:187) with 32% self" in (
        overlay.findings[0].evidence)


def test_bad_inputs_are_clear_and_bounded(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duration_s"):
        ProfileCpuInput(pid=[1], duration_s=0)
    with pytest.raises(ValueError, match="duration_s"):
        ProfileCpuInput(pid=[1], duration_s=10**6)
    with pytest.raises(ValueError, match="pass one of pid, match or from_files"):
        ProfileCpuInput(pid=[1], match="train.py")
    with pytest.raises(ValueError, match="each node finds the job's ranks itself"):
        ProfileCpuInput(pid=[1], slurm_job="12")
    with pytest.raises(BadInput, match="no distributed job found on this host"):
        profile(tmp_path)  # no pid: the job's ranks (RANK / WORLD_SIZE) on this host, and there are none
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(BadInput, match="no such process"):
        profile(tmp_path, pid=[gone.pid])
    # Not Python: py-spy refuses, said plainly, and the process is not left stopped.
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(UnreadableInput, match="not a Python process|py-spy"):
            profile(tmp_path, pid=[sleeper.pid], duration_s=1)
        assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED
    finally:
        sleeper.kill()
        sleeper.wait()
    big = tmp_path / "huge.txt"
    with big.open("wb") as handle:
        handle.truncate(2 * 1024**3)
    with pytest.raises(LimitExceeded, match="read up to"):
        profile(tmp_path, from_files=["huge.txt"])
    # A speedscope profile with a 10^6-deep stack: read within bounds (frames past 512 of a sample are cut).
    deep = {"shared": {"frames": [{"name": f"f{i}", "file": "deep.py", "line": i} for i in range(1000)]},
            "profiles": [{"type": "sampled", "name": 'Thread 1 "MainThread"', "samples": [list(range(1000)) * 1000],
                          "weights": [0.01]}]}
    (tmp_path / "deep.json").write_text(json.dumps(deep))
    started = time.monotonic()
    result = profile(tmp_path, from_files=["deep.json"])
    assert time.monotonic() - started < 10 and result.processes[0].samples == 1
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(UnreadableInput, match="speedscope"):
        profile(tmp_path, from_files=["junk.json"])


def test_the_report_records_the_pids_it_is_given(tmp_path: Path) -> None:
    from tools.triage import TriageReportInput, triage_report

    with lab_job("workers0", tmp_path) as pid:
        report = anyio.run(triage_report, TriageReportInput(health=False, pids=[pid], profile_cpu=True),
                           ToolContext(roots=(tmp_path.resolve(),)))
    assert {r.tool for r in report.runs} == {"dump_stacks", "profile_cpu"}
    row = next(r for r in report.rows if r.source == "profile_cpu")
    assert row.symptom == "input_bound_cpu: host CPU" and "heavy_transform" in row.evidence


@pytest.mark.anyio
async def test_a_py_spy_that_never_stops_is_killed_and_the_server_answers_after(tmp_path: Path) -> None:
    # Fault injection, not a stand-in: a `py-spy` first on PATH that ignores SIGINT and never exits (a py-spy
    # stuck on a target in uninterruptible I/O), recording its pid.
    tools_dir, pidfile = tmp_path / "bin", tmp_path / "py-spy.pid"
    tools_dir.mkdir()
    fake = tools_dir / "py-spy"
    fake.write_text(f"#!{sys.executable}\nimport os, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(3600)\n")
    fake.chmod(0o755)
    env = base_env(PATH=f"{tools_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        async with stdio_client(env, "--root", str(tmp_path), "--timeout", "30") as client:
            started = time.monotonic()
            answer = await client.call_tool("profile_cpu", {"pid": [target.pid], "duration_s": 1})
            elapsed = time.monotonic() - started
            again = await client.call_tool("profile_cpu", {"from_files": ["none.txt"]})
        assert answer.is_error and "did not stop on SIGINT" in answer.content[0].text, answer.content[0].text
        assert elapsed < 15, elapsed  # its duration, the grace, SIGINT's 3 s and SIGKILL's 2 s
        assert not pid_alive(int(pidfile.read_text()))
        assert psutil.Process(target.pid).status() != psutil.STATUS_STOPPED
        assert again.is_error and "none.txt" in again.content[0].text  # still serving
    finally:
        target.kill()
        target.wait()


def test_a_profile_with_too_few_samples_is_unknown(tmp_path: Path) -> None:
    from tools.core.thresholds import PROFILE_MIN_SAMPLES

    # A real py-spy raw line format (pid, thread, frames; count), cut to fewer samples than a share needs.
    (tmp_path / "short.txt").write_text(
        "process 4242:\"python train.py\";thread (0x7f0000000000): MainThread;<module> (train.py:10);"
        f"step (train.py:5) {PROFILE_MIN_SAMPLES - 1}\n")
    result = anyio.run(profile_cpu, ProfileCpuInput(from_files=["short.txt"]),
                       ToolContext(roots=(tmp_path.resolve(),)))
    assert result.severity.value == "unknown" and result.verdict == "none" and result.decides
    covered = result.coverage[0]
    assert covered.status.value == "read" and f"{PROFILE_MIN_SAMPLES - 1} samples" in covered.detail
