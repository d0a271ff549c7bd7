"""Fault lab: a DataLoader worker process is SIGKILLed (as the OOM killer would).

Single process, DataLoader with 2 workers over a small synthetic dataset.
LAB_KILL=main (default): after LAB_KILL_BATCH (default 5) batches, the main process sends SIGKILL
to worker 0's pid. The DataLoader's SIGCHLD handler raises "RuntimeError: DataLoader worker (pid N) is killed by signal:
Killed." in the main process, wherever it happens to be (here: in time.sleep).
LAB_KILL=self: the worker loading sample LAB_KILL_INDEX (default 40) stalls 1 s, then kills itself while
the main process waits for its batch; the handler's error is chained into
"RuntimeError: DataLoader worker (pid(s) N) exited unexpectedly".
"""

import os
import signal
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __init__(self, n: int, kill_index: int) -> None:
        self.n = n
        self.kill_index = kill_index

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.01)
        if i == self.kill_index:
            # stall first, so that the main process has drained the prefetched batches and is blocked
            # waiting for this worker's next batch when it dies (as when the OOM killer strikes)
            print(f"worker pid {os.getpid()} loading sample {i}: stalls, then SIGKILL to itself", flush=True)
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((8,), float(i * i))


def main() -> None:
    mode = os.environ.get("LAB_KILL", "main")
    kill_batch = int(os.environ.get("LAB_KILL_BATCH", "5"))
    kill_index = int(os.environ.get("LAB_KILL_INDEX", "40")) if mode == "self" else -1
    ds = Squares(400, kill_index)
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    print(f"main pid {os.getpid()} mode {mode}", flush=True)
    it = iter(loader)
    pids = [w.pid for w in it._workers]  # type: ignore[attr-defined]
    print(f"dataloader worker pids {pids}", flush=True)
    for step, batch in enumerate(it, start=1):
        print(f"step {step} batch sum {batch.sum().item():.0f}", flush=True)
        if mode == "main" and step == kill_batch:
            print(f"main: SIGKILL to dataloader worker 0 pid {pids[0]}", flush=True)
            os.kill(pids[0], signal.SIGKILL)
        time.sleep(0.02)
    print("epoch finished (unexpected)", flush=True)


if __name__ == "__main__":
    main()
