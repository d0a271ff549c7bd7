"""A training loop that the host, not the GPU, holds back, in one of five known ways (argv[1]):

- `workers0`: the Dataset's __getitem__ runs a heavy Python transform (heavy_transform) and the DataLoader has
  num_workers=0, so the main thread decodes every batch itself;
- `workers2`: the same transform in 2 DataLoader workers (fork), which cannot keep up: the main thread waits on
  the input queue while they run heavy_transform;
- `python_loop`: the data is ready, but each step runs a Python-heavy bookkeeping function (python_bookkeeping) on
  the main thread;
- `slow_storage`: 2 DataLoader workers read every sample through storage that answers slowly (SlowFile.read waits
  25 ms a read, as a saturated network file system does), so they wait on reads, not on the CPU;
- `gil_threads`: two background Python threads (a metrics / tokenizer thread, pure Python) run beside the main
  loop in the same process, and the three take turns on the GIL.
It trains a tiny CPU model forever and writes argv[2] (a ready file) after its first steps; the test records it
with py-spy and kills it. Used by tests/tools/host/test_profile.py.
"""

import sys
import threading
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


def heavy_transform(index: int) -> torch.Tensor:
    # A decode or augmentation done in pure Python: about 20 ms a sample.
    acc = 0.0
    for i in range(150_000):
        acc += (index * 31 + i) % 7 * 0.5
    return torch.full((32,), acc % 1.0)


class Images(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, index: int) -> torch.Tensor:
        return heavy_transform(index)


class Ready(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(32)


class SlowFile:
    """A file on storage that answers slowly: each read waits for the device first."""

    def __init__(self, path: Path) -> None:
        self.stream = path.open("rb")

    def read(self, size: int) -> bytes:
        time.sleep(0.025)  # the storage's latency, spent blocked as a read on a slow mount is
        self.stream.seek(0)
        return self.stream.read(size)


class OnSlowStorage(Dataset[torch.Tensor]):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: SlowFile | None = None

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.file is None:  # opened in the worker, after the fork
            self.file = SlowFile(self.path)
        return torch.frombuffer(bytearray(self.file.read(128)), dtype=torch.uint8)[:32].float()


def background_metrics() -> None:
    # A helper thread doing Python work for ever (metrics, tokenising, logging formatting).
    while True:
        python_bookkeeping(0)


def python_bookkeeping(step: int) -> float:
    # Per-step metrics computed in Python over a list: the main loop's own CPU time.
    values = [((step * 13 + i) % 97) / 97 for i in range(400_000)]
    return sum(values) / len(values)


def main() -> None:
    mode, ready = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    model = torch.nn.Linear(32, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    dataset: Dataset[torch.Tensor] = Images()
    if mode in ("python_loop", "gil_threads"):
        dataset = Ready()
    elif mode == "slow_storage":
        samples = ready.with_name(ready.name + ".data")
        samples.write_bytes(bytes(range(256)) * 4)
        dataset = OnSlowStorage(samples)
    if mode == "gil_threads":
        for _ in range(2):
            threading.Thread(target=background_metrics, daemon=True).start()
    loader = DataLoader(dataset, batch_size=4, num_workers=2 if mode in ("workers2", "slow_storage") else 0)
    started = time.monotonic()
    for step, batch in enumerate(loader):
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if mode == "python_loop":
            python_bookkeeping(step)
        if step == 3:
            ready.write_text(f"{time.monotonic() - started:.1f}")


if __name__ == "__main__":
    main()
