"""Recording job for tests/data/stacks/odd_rank/: one rank is not where the others are, for a reason other than a
collective. 4 ranks, DDP on a tiny MLP, gloo on CPU. Each rank reads its batches through a DataLoader (one worker
process). After step 3, the rank ODD_RANK does one of (ODD_KIND):

- dataloader: its dataset's __getitem__ (in the worker process) stalls on a slow storage read, so the main
  process waits in DataLoader.__next__ for the batch of step 4;
- save: it writes a checkpoint with torch.save to a file whose writes block (a pipe nobody reads, standing for a
  stalled file system);
- sleep: it waits for a marker file in a poll loop with time.sleep (a retry/backoff loop);
- compute: it runs an extra evaluation (forward passes of a bigger model) that takes minutes;
- barrier: it calls dist.barrier() while the others are in the gradient all-reduce (a different collective).

The other ranks go on to step 4 and block in the DDP gradient all-reduce inside loss.backward().
FH_DIR: every rank writes its faulthandler dump there (dump_traceback_later, armed after step 3).
"""

import datetime
import faulthandler
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

ODD_KIND = os.environ.get("ODD_KIND", "dataloader")
ODD_RANK = int(os.environ.get("ODD_RANK", "2"))
STALL_S = 600.0


class Shards(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 1000

    def read_shard(self, index: int) -> bytes:
        # Stands for a read from a stalled network file system: the read does not return.
        if ODD_KIND == "dataloader" and self.rank == ODD_RANK and index >= 3 * 16:
            time.sleep(STALL_S)
        return bytes(4)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.read_shard(index)
        g = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=g), torch.randn(1, generator=g)


def save_checkpoint(model: nn.Module, step: int) -> None:
    read_end, write_end = os.pipe()  # nobody reads: the writes block once the pipe is full
    state = {"model": model.state_dict(), "step": step, "extra": torch.zeros(1 << 20)}
    with os.fdopen(write_end, "wb") as f:
        torch.save(state, f)
    os.close(read_end)


def wait_for_marker(path: str) -> None:
    delay = 0.5
    while not os.path.exists(path):
        time.sleep(delay)
        delay = min(delay * 2, 8.0)


def evaluate(rank: int) -> None:
    big = nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)])
    x = torch.randn(256, 512)
    with torch.no_grad():
        for _ in range(100000):
            big(x)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Shards(rank), batch_size=16, num_workers=1, prefetch_factor=1)
    fh_dir = os.environ.get("FH_DIR")
    for step, (x, y) in enumerate(loader, start=1):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        if step == 3:
            if fh_dir:
                os.makedirs(fh_dir, exist_ok=True)
                out = open(os.path.join(fh_dir, f"rank_{rank}.txt"), "w")  # noqa: SIM115
                faulthandler.dump_traceback_later(6.0, file=out)
            if rank == ODD_RANK:
                if ODD_KIND == "save":
                    save_checkpoint(model.module, step)
                elif ODD_KIND == "sleep":
                    wait_for_marker("/nonexistent/marker/ready")
                elif ODD_KIND == "compute":
                    evaluate(rank)
                elif ODD_KIND == "barrier":
                    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
