"""Fault lab: collective mismatch on rank 3, seen with TORCH_DISTRIBUTED_DEBUG=DETAIL.

4 ranks, gloo on CPU, process-group timeout LAB_TIMEOUT_S (default 10 s).
LAB_MISMATCH=shape (default): rank 3 all-reduces a [20] tensor, the others a [10] tensor.
LAB_MISMATCH=op: rank 3 calls all_gather while the others call all_reduce.
With TORCH_DISTRIBUTED_DEBUG=DETAIL every rank raises "Detected mismatch between collectives on ranks".
Without it, a shape mismatch makes gloo abort on a neighbour rank (not the culprit).
"""

import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    timeout_s = float(os.environ.get("LAB_TIMEOUT_S", "10"))
    mode = os.environ.get("LAB_MISMATCH", "shape")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    debug = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF")
    print(f"rank {rank}/{world} pid {os.getpid()} mode {mode} TORCH_DISTRIBUTED_DEBUG={debug}", flush=True)
    # one good collective first, so the bad one is not the first in the sequence
    warm = torch.ones(10)
    dist.all_reduce(warm)
    print(f"rank {rank} warm-up all_reduce ok: {warm[0].item():.0f}", flush=True)
    if mode == "shape":
        t = torch.ones(20 if rank == 3 else 10)
        print(f"rank {rank} all_reduce shape {list(t.shape)}", flush=True)
        dist.all_reduce(t)
    elif mode == "op":
        t = torch.ones(10)
        if rank == 3:
            out = [torch.zeros(10) for _ in range(world)]
            print(f"rank {rank} all_gather shape {list(t.shape)}", flush=True)
            dist.all_gather(out, t)
        else:
            print(f"rank {rank} all_reduce shape {list(t.shape)}", flush=True)
            dist.all_reduce(t)
    else:
        raise SystemExit(f"unknown LAB_MISMATCH {mode!r}")
    print(f"rank {rank} finished (unexpected)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
