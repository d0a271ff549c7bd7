"""Fault lab: the classic rank-conditional collective hang.

DDP on a tiny MLP, 4 ranks, gloo on CPU, process-group timeout LAB_TIMEOUT_S (default 10 s).
After step 5 rank 0 alone calls dist.all_gather inside save_checkpoint() (under `if rank == 0:`);
ranks 1-3 go on to step 6 and block in the gradient all-reduce inside loss.backward().
After the timeout every rank raises the gloo timeout error.

Each rank also writes its own log file LAB_RANK_LOG_DIR/rank<R>.log (logging.FileHandler on the
root logger; uncaught exceptions are logged there too). main() is wrapped in torchrun's @record, so
the failure summary carries the root-cause rank's traceback (error_file).

Hang evidence for the stack and flight-recorder tools (both optional):
- LAB_FR_DIR: LAB_FR_DELAY_S (default 2) seconds after a rank passes step 5, a helper thread writes
  the flight recorder of that rank, as PyTorch dumps it, to LAB_FR_DIR/rank_<R> (pickle) and
  LAB_FR_DIR/json/rank_<R>.json (the JSON variant, no frames; a separate folder because PyTorch's
  analyzer wants one file per rank with a common prefix). By then every rank sits in the hang.
- LAB_FAULTHANDLER_DIR: SIGUSR1 makes the rank write every thread's Python stack (faulthandler) to
  LAB_FAULTHANDLER_DIR/rank_<R>.txt; it works while the main thread is blocked in C++.
"""

import datetime
import faulthandler
import os
import signal
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from _lab import log, setup_logging, tiny_ddp
from torch.distributed.elastic.multiprocessing.errors import record


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


def dump_flight_recorder_later(rank: int, passed_step5: threading.Event) -> None:
    out = os.environ.get("LAB_FR_DIR")
    if not out:
        return

    def dump() -> None:
        passed_step5.wait()
        time.sleep(float(os.environ.get("LAB_FR_DELAY_S", "2")))
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"rank_{rank}"), "wb") as f:
            f.write(torch._C._distributed_c10d._dump_fr_trace())
        os.makedirs(os.path.join(out, "json"), exist_ok=True)
        with open(os.path.join(out, "json", f"rank_{rank}.json"), "wb") as f:
            f.write(torch._C._distributed_c10d._dump_fr_trace_json())
        log.info("flight recorder written to %s/rank_%d", out, rank)

    threading.Thread(target=dump, name="fr-dump", daemon=True).start()


@record
def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    setup_logging(rank, log_uncaught=True)
    log.info("rank %d/%d pid %d started, pg timeout %.0f s", rank, world, os.getpid(), timeout_s)
    fh_dir = os.environ.get("LAB_FAULTHANDLER_DIR")
    if fh_dir:
        os.makedirs(fh_dir, exist_ok=True)
        faulthandler.register(signal.SIGUSR1, file=open(os.path.join(fh_dir, f"rank_{rank}.txt"), "w"),  # noqa: SIM115
                              all_threads=True)
    passed_step5 = threading.Event()
    dump_flight_recorder_later(rank, passed_step5)
    model, opt, g = tiny_ddp(rank)
    for step in range(1, 11):
        t0 = time.perf_counter()
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 1, generator=g)
        loss = train_step(model, opt, x, y)
        log.info("step %d loss %.4f time %.1f ms", step, loss, (time.perf_counter() - t0) * 1000)
        if step == 5:
            passed_step5.set()
        if step % 5 == 0 and rank == 0:
            save_checkpoint(model.module, step, rank, world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
