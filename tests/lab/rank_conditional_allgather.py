"""Fault lab: the classic rank-conditional collective hang.

DDP on a tiny MLP, 4 ranks, gloo on CPU, process-group timeout LAB_TIMEOUT_S (default 10 s).
After step 5 rank 0 alone calls dist.all_gather inside save_checkpoint() (under `if rank == 0:`);
ranks 1-3 go on to step 6 and block in the gradient all-reduce inside loss.backward().
After the timeout every rank raises the gloo timeout error.

Each rank also writes its own log file LAB_RANK_LOG_DIR/rank<R>.log (logging.FileHandler on the
root logger; uncaught exceptions are logged there too). main() is wrapped in torchrun's @record, so
the failure summary carries the root-cause rank's traceback (error_file).
"""

import datetime
import logging
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger("train")


def setup_logging(rank: int) -> None:
    fmt = logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(fmt)
    root.addHandler(out)
    log_dir = os.environ.get("LAB_RANK_LOG_DIR")
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        fh = logging.FileHandler(os.path.join(log_dir, f"rank{rank}.log"), mode="w")
        fh.setFormatter(fmt)
        root.addHandler(fh)

    def hook(tp, val, tb):  # type: ignore[no-untyped-def]
        log.critical("uncaught exception", exc_info=(tp, val, tb))

    sys.excepthook = hook


def save_checkpoint(model: nn.Module, step: int, rank: int, world: int) -> None:
    # BUG: a collective under a rank condition. Only rank 0 gets here.
    norms = torch.stack([p.detach().norm() for p in model.parameters()])
    gathered = [torch.zeros_like(norms) for _ in range(world)]
    log.info("step %d: saving checkpoint, gathering parameter norms from all ranks", step)
    dist.all_gather(gathered, norms)
    log.info("step %d: checkpoint saved", step)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.item())


@record
def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    setup_logging(rank)
    log.info("rank %d/%d pid %d started, pg timeout %.0f s", rank, world, os.getpid(), timeout_s)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, 11):
        t0 = time.perf_counter()
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 1, generator=g)
        loss = train_step(model, opt, x, y)
        log.info("step %d loss %.4f time %.1f ms", step, loss, (time.perf_counter() - t0) * 1000)
        if step % 5 == 0 and rank == 0:
            save_checkpoint(model.module, step, rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
