"""CPU-bound reading spread over worker processes (unpickling flight-recorder dumps, regex over many logs).

Python holds the GIL while it parses, so threads do not help: big inputs are split into one share per CPU and
each share is read by a spawned process that runs only our reader on our own list of files and hands back plain
data. Spawn, not fork: no server thread, lock or open client stream is inherited. Below the size where starting
the processes pays off, everything runs in the calling thread.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

__all__ = ["map_taking_turns", "run_in_shares", "usable_cores", "worker_count"]

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or a Slurm step's share), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_count(items: int, total_bytes: int, threshold_bytes: int, max_workers: int) -> int:
    """How many processes to use: 1 below the threshold, else one per CPU up to `max_workers`."""
    if total_bytes < threshold_bytes:
        return 1
    return max(1, min(os.cpu_count() or 1, max_workers, items))


def run_in_shares(function: Callable[..., R], items: Sequence[T], workers: int, *args: Any) -> list[R]:
    """`function(share, *args)` for each share of `items` (interleaved, so sizes even out), in order of the shares;
    in this thread when `workers` is 1."""
    if workers <= 1:
        return [function(list(items), *args)]
    shares = [list(items[i::workers]) for i in range(workers)]
    try:
        # The calling thread reads the first share itself: one process fewer to start.
        with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(function, share, *args) for share in shares[1:]]
            first = function(shares[0], *args)
            return [first, *(future.result() for future in futures)]
    except (BrokenProcessPool, OSError):
        # Workers could not start here (no /dev/shm, process limits, a main module that cannot be re-imported):
        # slower, but the answer is the same.
        return [function(list(items), *args)]


def map_taking_turns(function: Callable[..., R], items: Sequence[T], workers: int, *args: Any) -> list[R]:
    """`function(item, *args)` for each item, in order of the items. The calling thread and `workers - 1` spawned
    processes each take the next item when done with their last: a process that starts late (it imports the
    readers first) or one large item does not leave the others idle, as fixed shares would."""
    if workers <= 1 or len(items) <= 1:
        return [function(item, *args) for item in items]
    results: dict[int, R] = {}
    order = iter(range(len(items)))
    lock = threading.Lock()
    stop = threading.Event()  # the calling thread failed: no one takes another item

    def take() -> int | None:
        with lock:
            return None if stop.is_set() else next(order, None)

    try:
        with ProcessPoolExecutor(workers - 1, mp_context=multiprocessing.get_context("spawn")) as pool:

            def feed() -> None:  # one thread per process hands it one item at a time
                while (index := take()) is not None:
                    results[index] = pool.submit(function, items[index], *args).result()

            with ThreadPoolExecutor(workers - 1, thread_name_prefix="turns") as feeders:
                fed = [feeders.submit(feed) for _ in range(workers - 1)]
                try:
                    while (index := take()) is not None:
                        results[index] = function(items[index], *args)
                except BaseException:
                    stop.set()
                    _stop_workers(pool)  # past the deadline (or failed): a worker's item is not waited for
                    raise
                for future in fed:
                    future.result()  # a process's exception is raised here, as the calling thread's would be
    except (BrokenProcessPool, OSError):
        # Workers could not start here (see run_in_shares): what they did not finish is read in this thread.
        pass
    return [results[i] if i in results else function(items[i], *args) for i in range(len(items))]


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Stop the pool's processes now: the call they work for has failed or run out of time, and a worker may still be
    starting up or halfway through a large item. (Python 3.14 names this terminate_workers; before it, the pool's
    own table of processes.)"""
    terminate = getattr(pool, "terminate_workers", None)
    if callable(terminate):
        terminate()
        return
    for process in list(getattr(pool, "_processes", {}).values()):
        process.terminate()

