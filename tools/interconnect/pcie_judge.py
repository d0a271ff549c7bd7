"""The judgement of PCIe links (lspci -vv, nvidia-smi -q) of the devices a GPU job's data crosses (GPUs, NICs,
storage and the bridges they sit behind; a USB or audio controller is noted, not judged): a width below what the
link can do is degraded; a speed below it only where power saving cannot explain it: software capped the target
speed, the device is not a GPU (NICs and NVMe drives keep the speed they trained at), or the GPU was under load. An
idle GPU drops to Gen1 by design, and a paste that shows neither the device nor its load cannot tell the two apart:
unknown, with the reading that decides."""

from __future__ import annotations

from tools.core.models import Severity
from tools.core.thresholds import PCIE_BUSY_KBS, UNDER_LOAD_PCT
from tools.interconnect.evidence import Evidence, Link
from tools.interconnect.pcie import PcieLink

__all__ = ["judge_pcie"]

_RESEAT = ("Reseat the card, check the slot's lanes (riser, bifurcation, a slot wired x8) and the BIOS's link "
           "settings; drain the node if it is a GPU or NIC of a job.")


def _said(link: PcieLink) -> str:
    now = f"Gen{link.gen or '?'} x{link.width or '?'}"
    can = f"Gen{link.cap_gen or '?'} x{link.cap_width or '?'}" if link.cap_gen or link.cap_width else "its maximum"
    return f"{link.device}" + (f" ({link.name})" if link.name else "") + f" runs at {now} of {can}"


def judge_pcie(links: list[PcieLink], node: str, found: Evidence) -> None:
    for link in links:
        found.links.append(Link(node=node, kind="pcie", name=link.device, state=f"Gen{link.gen or '?'} "
                                f"x{link.width or '?'}", speed="-", expected=f"Gen{link.cap_gen or '?'} "
                                f"x{link.cap_width or '?'}"))
        slow = link.speed_below or (link.downgraded and link.cap_gen is None and not link.width_below)
        if not link.job_device and (slow or link.width_below):
            found.notes.append(f"{node}: {_said(link)}: not a device of the job's data path (a GPU, NIC, storage or "
                               "the bridge they sit behind), not judged.")
            continue
        if link.width_below:
            found.add("pcie_degraded", Severity.warn, f"{_said(link)}: {link.width} lane(s) of {link.cap_width}",
                      _RESEAT, node)
            continue
        if not slow:
            continue
        busy = (link.utilization_pct is not None and link.utilization_pct >= UNDER_LOAD_PCT) or (
            link.throughput_kbs is not None and link.throughput_kbs >= PCIE_BUSY_KBS)
        idle = link.utilization_pct is not None and not busy
        if link.target_gen is not None and link.cap_gen is not None and link.target_gen < link.cap_gen:
            found.add("pcie_degraded", Severity.warn, f"{_said(link)}, and LnkCtl2 sets its target speed to "
                      f"Gen{link.target_gen}: the link is capped below what it can do", "Raise the slot's link speed "
                      "in the BIOS (or setpci's Target Link Speed) and retrain; a riser or retimer may need it.", node)
        elif link.gpu is False or busy:
            why = (f"under load ({link.utilization_pct:g} % GPU utilisation)" if busy and link.utilization_pct
                   is not None else "under load" if busy else "a device that does not lower its link speed to save "
                   "power")
            found.add("pcie_degraded", Severity.warn, f"{_said(link)}: {why}", _RESEAT, node)
        elif idle:
            found.notes.append(f"{node}: {_said(link)} at {link.utilization_pct:g} % utilisation: an idle GPU "
                               "lowers its link speed to save power (not degraded).")
        else:
            found.add("pcie_degraded", Severity.unknown, f"{_said(link)}"
                      + (" (lspci: downgraded)" if link.downgraded else "") + "; an idle GPU lowers its link speed to "
                      "save power, and this capture shows neither the device's kind nor its load",
                      "Read the link again while the GPU is busy (lspci -vv -s <bus> | grep LnkSta during a "
                      "bandwidth test, or nvidia-smi -q -d PCIE,UTILIZATION): still below its maximum under load is "
                      "degraded.", node)
