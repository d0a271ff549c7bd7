"""Fault lab: rank 3 skips one all_reduce; ranks 0-2 hit the gloo timeout.

4 ranks under torchrun, gloo on CPU, process-group timeout LAB_TIMEOUT_S (default 10 s).
Every step each rank all-reduces a tensor; at step LAB_FAULT_STEP (default 3) rank 3 sleeps
LAB_SLEEP_S (default 60 s) instead of joining. Ranks 0-2 raise
"Timed out waiting ...ms for ... operation to complete"; torchrun then SIGTERMs rank 3.
"""

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    fault_step = int(os.environ.get("LAB_FAULT_STEP", "3"))
    sleep_s = float(os.environ.get("LAB_SLEEP_S", "60"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} pid {os.getpid()} up, pg timeout {timeout_s:.0f}s", flush=True)
    for step in range(1, 8):
        t0 = time.perf_counter()
        x = torch.full((1024,), float(rank))
        if rank == 3 and step == fault_step:
            print(f"rank {rank} step {step}: skipping all_reduce, sleeping {sleep_s:.0f}s", flush=True)
            time.sleep(sleep_s)
            continue
        dist.all_reduce(x)
        dt = (time.perf_counter() - t0) * 1000
        print(f"rank {rank} step {step} all_reduce sum {x[0].item():.0f} time {dt:.1f} ms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
