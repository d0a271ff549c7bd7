"""What several fault-lab scripts share: per-rank logging and the tiny DDP model they train.

torchrun puts the script's own folder first on sys.path, so the scripts import this as `_lab`.
"""

import logging
import os
import sys

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger("train")


def setup_logging(rank: int, *, log_uncaught: bool = False) -> None:
    """Log to stdout with a [rankR] tag, and to LAB_RANK_LOG_DIR/rank<R>.log when that is set."""
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
    if log_uncaught:

        def hook(tp, val, tb):  # type: ignore[no-untyped-def]
            log.critical("uncaught exception", exc_info=(tp, val, tb))

        sys.excepthook = hook


def tiny_ddp(rank: int) -> tuple[DDP, torch.optim.Optimizer, torch.Generator]:
    """The 32-64-1 MLP under DDP, its SGD optimizer, and a per-rank data generator."""
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.Generator().manual_seed(rank)
