"""The interconnect: NCCL's transports and NICs, nccl-tests bandwidth, the GPU/NIC topology and link state."""

from tools.interconnect.check import (
    CheckInterconnectInput,
    CheckInterconnectResult,
    check_interconnect,
)

__all__ = ["CheckInterconnectInput", "CheckInterconnectResult", "check_interconnect"]
