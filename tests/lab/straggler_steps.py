"""Fault lab: a straggler rank in DDP (rank LAB_SLOW_RANK, default 2, computes slower).

4 ranks, gloo on CPU, DDP on a small MLP, LAB_STEPS (default 30) steps. Each step rank 2 sleeps an
extra LAB_EXTRA_MS (default 30 ms) in its forward (simulated slow compute). Each rank logs, per step,
"rank R step S time T ms" (wall time of the whole step), the split into compute (forward+loss),
backward (which includes DDP's gradient all-reduce, i.e. the wait for the slowest rank) and
optimizer, plus an HF-Trainer-like dict line.
Per-rank log files: LAB_RANK_LOG_DIR/rank<R>.log (logging.FileHandler), also echoed to stdout.
LAB_TRACE_DIR: torch.profiler (CPU) records steps 6-15 of every rank to LAB_TRACE_DIR/rank<R>.json; the forward
(with rank 2's extra time) is a record_function("forward") region. On gloo the wait for the slowest rank shows
as gloo:all_reduce on the gloo worker thread.
"""

import contextlib
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from _lab import log, setup_logging
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    slow_rank = int(os.environ.get("LAB_SLOW_RANK", "2"))
    extra_ms = float(os.environ.get("LAB_EXTRA_MS", "30"))
    steps = int(os.environ.get("LAB_STEPS", "30"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    setup_logging(rank)
    log.info("rank %d/%d pid %d started; slow rank %d (+%.0f ms/step)", rank, world, os.getpid(), slow_rank, extra_ms)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=steps)
    g = torch.Generator().manual_seed(rank)
    steps_per_epoch = 10
    trace_dir = os.environ.get("LAB_TRACE_DIR")
    profiler: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)

        def save(prof: torch.profiler.profile) -> None:
            prof.export_chrome_trace(os.path.join(trace_dir, f"rank{rank}.json"))

        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                          schedule=torch.profiler.schedule(wait=3, warmup=2, active=10, repeat=1),
                                          on_trace_ready=save)
    with profiler as prof:
        for step in range(1, steps + 1):
            train_step(step, rank, slow_rank, extra_ms, model, opt, sched, g, steps_per_epoch)
            if trace_dir:
                prof.step()  # type: ignore[attr-defined]
    dist.barrier()
    log.info("rank %d done", rank)
    dist.destroy_process_group()


def train_step(step: int, rank: int, slow_rank: int, extra_ms: float, model: nn.Module, opt: torch.optim.Optimizer,
               sched: torch.optim.lr_scheduler.LRScheduler, g: torch.Generator, steps_per_epoch: int) -> None:
    t0 = time.perf_counter()
    x, y = torch.randn(64, 256, generator=g), torch.randn(64, 1, generator=g)
    opt.zero_grad()
    with torch.profiler.record_function("forward"):
        loss = nn.functional.mse_loss(model(x), y)
        if rank == slow_rank:
            time.sleep(extra_ms / 1000)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0))
    opt.step()
    lr = sched.get_last_lr()[0]
    sched.step()
    t3 = time.perf_counter()
    log.info(
        "rank %d step %d time %.1f ms (compute %.1f ms, backward+allreduce %.1f ms, optim %.1f ms) loss %.4f",
        rank,
        step,
        (t3 - t0) * 1000,
        (t1 - t0) * 1000,
        (t2 - t1) * 1000,
        (t3 - t2) * 1000,
        loss.item(),
    )
    if step % 5 == 0:
        log.info(
            "%s",
            {
                "loss": round(loss.item(), 4),
                "grad_norm": round(grad_norm, 4),
                "learning_rate": lr,
                "epoch": round(step / steps_per_epoch, 2),
            },
        )


if __name__ == "__main__":
    main()
