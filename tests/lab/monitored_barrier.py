"""Fault lab: rank 3 never reaches dist.monitored_barrier.

4 ranks, gloo on CPU. Ranks 0-2 call dist.monitored_barrier(timeout=LAB_TIMEOUT_S, default 10 s);
rank 3 sleeps LAB_SLEEP_S (default 60 s) first. Rank 0 raises
"Rank 3 failed to pass monitoredBarrier in 10000 ms".
"""

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    sleep_s = float(os.environ.get("LAB_SLEEP_S", "60"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} pid {os.getpid()} up", flush=True)
    x = torch.ones(4)
    dist.all_reduce(x)
    print(f"rank {rank} epoch 0 done, all_reduce {x[0].item():.0f}", flush=True)
    if rank == 3:
        print(f"rank {rank} stuck in evaluation for {sleep_s:.0f}s", flush=True)
        time.sleep(sleep_s)
    print(f"rank {rank} entering monitored_barrier(timeout={timeout_s:.0f}s)", flush=True)
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s))
    print(f"rank {rank} passed monitored_barrier", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
