"""Fault lab: "OSError: [Errno 24] Too many open files" in a DataLoader.

Single process; the script lowers RLIMIT_NOFILE to LAB_NOFILE (default 64) with resource.setrlimit.
LAB_FD_MODE=leak (default): the dataset opens one shard file per sample and never closes it
(a classic leak); a DataLoader worker runs out of descriptors. With LAB_SHARING_STRATEGY=file_system
the main process re-raises "OSError: Caught OSError in DataLoader worker process N. ...
OSError: [Errno 24] Too many open files: '<path>'"; with the default file_descriptor strategy the
worker's multiprocessing resource_sharer fails first (dup() -> OSError: [Errno 24]) and the main process
gets EOFError while unpickling the batch; with LAB_WORKERS=0 open() itself raises in the main process:
"OSError: [Errno 24] Too many open files: '<path>'".
LAB_FD_MODE=sharing: no leak, but with the default "file_descriptor" sharing strategy every tensor
a worker sends holds a descriptor; the main process keeps the batches alive and runs out.
"""

import os
import resource
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset


class ShardDataset(Dataset):
    def __init__(self, root: str, n: int) -> None:
        self.paths = []
        for i in range(n):
            p = os.path.join(root, f"shard_{i:05d}.bin")
            with open(p, "wb") as f:
                f.write(bytes(range(64)))
            self.paths.append(p)
        self.leaked: list = []

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        f = open(self.paths[i], "rb")  # never closed: the leak is the point
        self.leaked.append(f)
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).float()


class TensorListDataset(Dataset):
    def __len__(self) -> int:
        return 4000

    def __getitem__(self, i: int) -> list:
        return [torch.full((4,), float(i)) for _ in range(8)]


def main() -> None:
    nofile = int(os.environ.get("LAB_NOFILE", "64"))
    mode = os.environ.get("LAB_FD_MODE", "leak")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    strategy = os.environ.get("LAB_SHARING_STRATEGY")
    if strategy:
        torch.multiprocessing.set_sharing_strategy(strategy)
    print(f"pid {os.getpid()} mode {mode} RLIMIT_NOFILE {soft} -> {nofile} (hard {hard})", flush=True)
    print(f"sharing strategy {torch.multiprocessing.get_sharing_strategy()}", flush=True)
    if mode == "leak":
        root = tempfile.mkdtemp(prefix="lab_shards_")
        ds: Dataset = ShardDataset(root, 2000)
        loader = DataLoader(ds, batch_size=8, num_workers=int(os.environ.get("LAB_WORKERS", "2")))
        for step, batch in enumerate(loader, start=1):
            if step % 10 == 0:
                print(f"step {step} batch mean {batch.mean().item():.2f}", flush=True)
    elif mode == "sharing":
        loader = DataLoader(TensorListDataset(), batch_size=4, num_workers=2)
        kept = []
        for step, batch in enumerate(loader, start=1):
            kept.append(batch)  # e.g. collecting batches for evaluation
            if step % 10 == 0:
                print(f"step {step} kept {len(kept)} batches", flush=True)
    else:
        raise SystemExit(f"unknown LAB_FD_MODE {mode!r}")
    print("done (unexpected)", flush=True)


if __name__ == "__main__":
    main()
