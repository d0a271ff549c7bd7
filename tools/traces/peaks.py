"""Dense peak throughput of common GPUs, the denominator of model FLOPs utilisation (MFU).

Figures are TFLOP/s without structured sparsity (vendors' datasheets print the 2:4-sparse figure for tensor
cores, with an asterisk: these are half of it). FP32 is the non-tensor rate (what an fp32 matmul gets with
TF32 off, PyTorch's default since 1.12). Sources, each read for the figures below:
- V100: NVIDIA Tesla V100 datasheet (volta-v100-datasheet-update-us-1165301-r5.pdf), SXM2 and PCIe.
- A10: NVIDIA A10 datasheet (a10-datasheet.pdf).
- A100: NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf), SXM and PCIe alike.
- L4: NVIDIA L4 datasheet (resources.nvidia.com, l4-gpu-datasheet).
- L40S: NVIDIA L40S datasheet (resources.nvidia.com, l40s-datasheet).
- H100, H200: NVIDIA H100 datasheet (nvidia-tensor-core-gpu-datasheet) and the H200 product page, SXM and PCIe/NVL.
- B200: NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), per GPU.
- MI250X, MI300X: AMD Instinct product pages (amd.com/en/products/accelerators/instinct), matrix rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DevicePeak", "Precision", "device_peak"]

Precision = str  # "fp32", "tf32", "bf16", "fp16", "fp8"


@dataclass(frozen=True)
class DevicePeak:
    device: str
    tflops: dict[Precision, float]  # dense TFLOP/s by precision; a precision the device lacks is absent


def _peaks(fp32: float, tf32: float | None, half: float, fp8: float | None = None,
           bf16: bool = True) -> dict[str, float]:
    table = {"fp32": fp32, "fp16": half}
    if bf16:
        table["bf16"] = half
    if tf32 is not None:
        table["tf32"] = tf32
    if fp8 is not None:
        table["fp8"] = fp8
    return table


# Most specific first: the name deviceProperties gives ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB",
# "AMD Instinct MI300X") is matched against each pattern in turn.
_TABLE: list[tuple[re.Pattern[str], DevicePeak]] = [(re.compile(p, re.IGNORECASE), DevicePeak(d, t)) for p, d, t in [
    (r"V100S", "V100S PCIe", _peaks(16.4, None, 130, bf16=False)),
    (r"V100.*(?:SXM|DGX)", "V100 SXM2", _peaks(15.7, None, 125, bf16=False)),
    (r"V100", "V100 PCIe", _peaks(14, None, 112, bf16=False)),
    (r"A100", "A100", _peaks(19.5, 156, 312)),
    (r"\bA10\b(?!0)", "A10", _peaks(31.2, 62.5, 125)),
    (r"L40S", "L40S", _peaks(91.6, 183, 362.05, 733)),
    (r"\bL4\b", "L4", _peaks(30.3, 60, 121, 242.5)),
    (r"H100.*PCIe", "H100 PCIe", _peaks(51.2, 378, 756, 1513)),
    (r"H100.*NVL|H200.*NVL", "H100/H200 NVL", _peaks(60, 417.5, 835, 1670)),
    (r"H100|H200|GH200|H800", "H100/H200 SXM", _peaks(66.9, 494.7, 989.4, 1978.9)),
    (r"B200|GB200", "B200 (HGX)", _peaks(80, 1100, 2250, 4500)),
    (r"MI300X", "MI300X", _peaks(163.4, 653.7, 1307.4, 2614.9)),
    (r"MI250X", "MI250X", _peaks(95.7, None, 383)),
    (r"MI250", "MI250", _peaks(90.5, None, 362.1)),
]]


def device_peak(name: str) -> DevicePeak | None:
    """The dense peaks of the GPU named `name` (as deviceProperties or nvidia-smi print it), or None."""
    return next((peak for pattern, peak in _TABLE if pattern.search(name)), None)
