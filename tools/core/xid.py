"""What NVIDIA Xid codes mean for a training job (from NVIDIA's Xid catalog, in our words), shared by
health_check (kernel log) and diagnose_logs (logs that include dmesg/syslog lines)."""

from __future__ import annotations

from tools.core.models import Severity

__all__ = ["XID_MEANING", "xid_meaning"]

XID_MEANING: dict[int, tuple[Severity, str]] = {
    13: (Severity.warn, "graphics engine exception (often an application bug, e.g. out-of-bounds access)"),
    31: (Severity.warn, "GPU memory page fault (usually an application bug)"),
    43: (Severity.warn, "a GPU context was stopped after a fault"),
    45: (Severity.warn, "preemptive cleanup after a context was killed"),
    48: (Severity.crit, "double-bit ECC error"),
    61: (Severity.crit, "internal microcontroller breakpoint/halt"),
    62: (Severity.crit, "internal microcontroller halt"),
    63: (Severity.crit, "ECC page retirement or row remap recorded"),
    64: (Severity.crit, "ECC page retirement or row remap failed"),
    74: (Severity.crit, "NVLink error"),
    79: (Severity.crit, "GPU has fallen off the bus"),
    92: (Severity.warn, "high single-bit ECC error rate"),
    94: (Severity.crit, "contained ECC error"),
    95: (Severity.crit, "uncontained ECC error"),
    119: (Severity.crit, "GSP RPC timeout"),
    120: (Severity.crit, "GSP error"),
}


def xid_meaning(code: int) -> tuple[Severity, str]:
    return XID_MEANING.get(code, (Severity.warn, "driver-reported GPU error"))
