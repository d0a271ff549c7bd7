"""Records tests/data/stacks/odd_rank/<kind>/: runs odd_rank_job.py under torchrun (4 ranks, gloo, CPU) with
ODD_KIND=<kind>, waits until every rank has written its faulthandler dump (the hang is then in place), dumps each
worker with py-spy (text, --json, --native) and kills the job. Usage: .venv/bin/python record.py <kind> <odd rank>
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent


def main() -> None:
    kind, odd = sys.argv[1], sys.argv[2]
    out = HERE / kind
    shutil.rmtree(out, ignore_errors=True)
    for sub in ("pyspy_text", "pyspy_json", "pyspy_native", "faulthandler"):
        (out / sub).mkdir(parents=True)
    env = dict(os.environ, ODD_KIND=kind, ODD_RANK=odd, FH_DIR=str(out / "faulthandler"), OMP_NUM_THREADS="1")
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                 "4", str(HERE / "odd_rank_job.py")], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not all((out / "faulthandler" / f"rank_{r}.txt").stat().st_size > 0
                      if (out / "faulthandler" / f"rank_{r}.txt").exists() else False for r in range(4)):
            assert launcher.poll() is None and time.monotonic() < deadline, "the job did not reach its hang"
            time.sleep(0.5)
        workers = {}
        for child in psutil.Process(launcher.pid).children():
            rank = child.environ().get("RANK")
            if rank is not None:
                workers[int(rank)] = child.pid
        for rank, pid in sorted(workers.items()):
            for sub, flags, name in (("pyspy_text", [], f"rank{rank}.txt"), ("pyspy_json", ["--json"],
                                     f"rank{rank}.json"), ("pyspy_native", ["--native"], f"rank{rank}.txt")):
                done = subprocess.run([str(VENV_BIN / "py-spy"), "dump", "--pid", str(pid), *flags],
                                      capture_output=True, timeout=60, check=True)
                (out / sub / name).write_bytes(done.stdout)
    finally:
        for child in psutil.Process(launcher.pid).children(recursive=True):
            child.kill()
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


if __name__ == "__main__":
    main()
