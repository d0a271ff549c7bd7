"""The interconnect captures of this node, taken now: `nvidia-smi topo -m` and `topo -p2p r`, `nvidia-smi nvlink -s`
and `-e`,
`ibstat`, and `ethtool IFACE` for the node's physical interfaces.

Read-only programs of the allow-list (tools/core/proc.py) with fixed arguments; the only variable part is an
interface name, and only one that this node's /sys/class/net lists (never a caller's text as such: a name is
checked against that listing and a strict pattern first). A program that is missing or fails is a note, not an
error: a node without IB has no ibstat to run, a node without a driver no nvidia-smi.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from tools.core.errors import BadInput, LimitExceeded, TriageError, Unavailable
from tools.core.limits import NET_LIVE_TIMEOUT_S
from tools.core.proc import run_program

__all__ = ["LiveCapture", "allowed_cpus", "capture_this_node", "gpu_of_pids", "physical_interfaces", "pids_on_gpus"]

_IFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}$")  # IFNAMSIZ is 16 with the NUL
_SYS_NET = Path("/sys/class/net")


@dataclass(frozen=True)
class LiveCapture:
    name: str  # what ran, e.g. "nvidia-smi topo -m"
    text: str


def physical_interfaces(sys_net: Path = _SYS_NET) -> list[str]:
    """The node's interfaces backed by a device (not lo, bridges, veths, tunnels): the ones a NIC can be."""
    try:
        entries = sorted(sys_net.iterdir())
    except OSError:
        return []
    return [e.name for e in entries if _IFACE.match(e.name) and (e / "device").exists()]


def _driver(interface: Path) -> str | None:
    try:
        return Path((interface / "device" / "driver").resolve()).name
    except OSError:
        return None


def _checked(names: Sequence[str], sys_net: Path) -> list[str]:
    """The caller's interface names, each one this node has; anything else is refused before anything runs."""
    try:
        present = {e.name for e in sys_net.iterdir()}
    except OSError:
        present = set()
    for name in names:
        if not _IFACE.match(name):
            raise BadInput(f"{name!r} is not an interface name.", "Pass names such as eth0 or ib0 (ip -br link).")
        if name not in present:
            raise BadInput(f"this node has no interface {name!r}.", f"Its interfaces: {', '.join(sorted(present))}.")
    return list(names)


async def capture_this_node(interfaces: Sequence[str] = (), timeout_s: float = NET_LIVE_TIMEOUT_S,
                            sys_net: Path = _SYS_NET) -> tuple[list[LiveCapture], list[str]]:
    """What the read-only programs say on this node now, and a note for each that could not run."""
    chosen = _checked(interfaces, sys_net) if interfaces else physical_interfaces(sys_net)
    notes: list[str] = []
    # A VM's virtio NIC reports no speed at all: nothing ethtool could say about it is a finding.
    virtio = [name for name in chosen if _driver(sys_net / name) == "virtio_net"]
    if virtio and not interfaces:
        chosen = [name for name in chosen if name not in virtio]
        notes.append(f"{', '.join(virtio)}: virtio NIC(s) of a VM, which report no link speed (not read).")
    commands: list[tuple[str, str, list[str]]] = [
        ("nvidia-smi topo -m", "nvidia-smi", ["topo", "-m"]),
        ("nvidia-smi topo -p2p r", "nvidia-smi", ["topo", "-p2p", "r"]),
        ("nvidia-smi nvlink -s", "nvidia-smi", ["nvlink", "-s"]),
        ("nvidia-smi nvlink -e", "nvidia-smi", ["nvlink", "-e"]),
        ("ibstat", "ibstat", []),
        *((f"ethtool {name}", "ethtool", [name]) for name in chosen),
    ]
    captures: list[LiveCapture] = []
    each = max(1.0, timeout_s / 2)  # they run together; each one bounded alone too

    async def one(label: str, program: str, args: list[str]) -> None:
        try:
            done = await run_program(program, args, timeout_s=each)
        except Unavailable:
            notes.append(f"{label}: {program} is not installed on this node.")
            return
        except (LimitExceeded, TriageError) as exc:
            notes.append(f"{label}: {exc}")
            return
        text = done.stdout.decode("utf-8", "replace")
        # A failed topo -p2p prints its complaint on stdout (old drivers, no second GPU): never a matrix to read.
        if done.returncode != 0 and (not text.strip() or "-p2p" in args):
            said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
            notes.append(f"{label}: exit {done.returncode}" + (f" ({said[-1][:200]})" if said else ""))
            return
        if not text.strip():
            notes.append(f"{label}: no output" + (" (no IB device on this node)" if program == "ibstat" else
                                                  " (no NVLink on these GPUs)" if "nvlink" in label else ""))
            return
        captures.append(LiveCapture(label, text))

    with anyio.move_on_after(timeout_s):
        async with anyio.create_task_group() as group:
            for label, program, args in commands:
                group.start_soon(one, label, program, args)
    order = {label: i for i, (label, _, _) in enumerate(commands)}
    return sorted(captures, key=lambda c: order[c.name]), notes


def gpu_of_pids(compute_apps_csv: str, gpus_csv: str) -> dict[int, int]:
    """pid -> GPU index from `nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader` and
    `--query-gpu=index,pci.bus_id --format=csv,noheader` (a header line, if any, is skipped)."""
    index_of: dict[str, int] = {}
    for line in gpus_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            index_of[parts[1].lower()] = int(parts[0])
    owners: dict[int, int] = {}
    for line in compute_apps_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].lower() in index_of:
            owners[int(parts[0])] = index_of[parts[1].lower()]
    return owners


async def pids_on_gpus(timeout_s: float = NET_LIVE_TIMEOUT_S) -> tuple[dict[int, int], list[str]]:
    """Which GPU each process on this node's GPUs uses (nvidia-smi, read-only queries), and notes."""
    texts: list[str] = []
    for args in (["--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"],
                 ["--query-gpu=index,pci.bus_id", "--format=csv,noheader"]):
        try:
            done = await run_program("nvidia-smi", args, timeout_s=max(1.0, timeout_s / 2))
        except (Unavailable, LimitExceeded, TriageError) as exc:
            return {}, [f"nvidia-smi {args[0]}: {exc}"]
        if done.returncode != 0:
            said = (done.stdout or done.stderr).decode("utf-8", "replace").strip().splitlines()
            return {}, [f"nvidia-smi {args[0]}: exit {done.returncode}" + (f" ({said[-1][:200]})" if said else "")]
        texts.append(done.stdout.decode("utf-8", "replace"))
    return gpu_of_pids(texts[0], texts[1]), []


def allowed_cpus(pid: int) -> set[int] | None:
    """The CPUs the kernel lets `pid` run on (its affinity mask), or None when it cannot be read (gone, not ours)."""
    try:
        return set(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return None
