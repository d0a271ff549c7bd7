"""Fault lab: rank 3 is SIGKILLed mid-training (as the OOM killer would).

DDP on a tiny MLP, 4 ranks, gloo on CPU, process-group timeout LAB_TIMEOUT_S (default 10 s).
Each step ends with a 0.2 s sleep. Rank 3 sends itself SIGKILL in step LAB_FAULT_STEP (default 4):
LAB_KILL_AT=end (default) right after that step's optimizer step, while its peers are idle, so their
next gradient all-reduce fails with "Connection closed by peer"; LAB_KILL_AT=start at the start of the
step, after its peers may already have sent it data, which gives "Connection reset by peer" instead.
torchrun reports rank 3 with exitcode -9.
"""

import datetime
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from _lab import tiny_ddp


def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    fault_step = int(os.environ.get("LAB_FAULT_STEP", "4"))
    kill_at = os.environ.get("LAB_KILL_AT", "end")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} pid {os.getpid()} started", flush=True)
    model, opt, g = tiny_ddp(rank)
    for step in range(1, 11):
        t0 = time.perf_counter()
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
        if rank == 3 and step == fault_step and kill_at == "start":
            print(f"rank {rank} step {step}: simulating the OOM killer, SIGKILL pid {os.getpid()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if rank == 3 and step == fault_step and kill_at == "end":
            print(f"rank {rank} step {step} done: simulating the OOM killer, SIGKILL pid {os.getpid()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.2)
        print(
            f"rank {rank} step {step} loss {loss.item():.4f} time {(time.perf_counter() - t0) * 1000:.1f} ms",
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
