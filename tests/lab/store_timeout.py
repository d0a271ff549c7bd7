"""Fault lab: rank 3 joins init_process_group late; the others time out in the store.

4 ranks, gloo on CPU, process-group timeout LAB_TIMEOUT_S (default 10 s). Rank 3 sleeps
LAB_SLEEP_S (default 60 s) before init_process_group. Ranks 0-2 raise
"DistStoreError: wait timeout after 10000ms, keys: ..." (the last key element is the missing rank).
"""

import datetime
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    sleep_s = float(os.environ.get("LAB_SLEEP_S", "60"))
    rank = int(os.environ["RANK"])
    print(f"rank {rank} pid {os.getpid()} loading dataset", flush=True)
    if rank == 3:
        print(f"rank {rank} slow dataset preprocessing, {sleep_s:.0f}s", flush=True)
        time.sleep(sleep_s)
    print(f"rank {rank} init_process_group(gloo, timeout={timeout_s:.0f}s)", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    x = torch.ones(4)
    dist.all_reduce(x)
    print(f"rank {rank} all_reduce {x[0].item():.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
