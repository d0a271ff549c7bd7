"""Achieved compute: the FLOPs a trace records, as TFLOP/s over the analysed steps and as MFU against the
device's dense peak (peaks.py).

Two sources, the better one per op: the profiler's own count (`with_flops=True` puts `flops` on matmul,
convolution and elementwise ops), else, for matmuls only, 2*M*N*K from the shapes `record_shapes=True`
records ("Input Dims"). Only leaf matmul ops are counted from shapes (aten::mm, addmm, bmm, baddbmm,
_scaled_mm), never aten::linear or aten::matmul above them, so nothing is counted twice; convolutions need
strides and padding the shapes do not give, so from shapes they are left out (said in the result).
"""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tools.traces.peaks import device_peak

__all__ = ["SHAPED_OPS", "Achieved", "FlopCounter", "achieved", "kernel_precision"]

_MATMULS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"})
_CONVOLUTIONS = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
                           "aten::cudnn_convolution", "aten::conv_transpose2d", "aten::mkldnn_convolution"})
# The ops whose FLOPs add_op can find without the profiler's count (from their shapes), or counts as convolutions:
# for any other op without a count it does nothing.
SHAPED_OPS = _MATMULS | _CONVOLUTIONS
# The operands' positions in "Input Dims": addmm and baddbmm have the bias first.
_OPERANDS = {"aten::addmm": (1, 2), "aten::baddbmm": (1, 2)}
_PRECISION = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8",
              "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8",
              "double": "fp64"}
_LIST = msgspec.json.Decoder(list[Any])


def _dims(raw: msgspec.Raw) -> list[Any] | None:
    if not raw:
        return None
    try:
        value = _LIST.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return value


def _matmul_flops(name: str, dims: list[Any]) -> float | None:
    """2 * batch * M * N * K of a matmul from its operand shapes, or None when they do not fit."""
    first, second = _OPERANDS.get(name, (0, 1))
    if len(dims) <= second:
        return None
    a, b = dims[first], dims[second]
    if not (isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and len(a) in (2, 3)):
        return None
    if not all(isinstance(x, int) and x >= 0 for x in (*a, *b)) or a[-1] != b[-2]:
        return None
    batch = a[0] if len(a) == 3 else 1
    return float(2 * batch * a[-2] * a[-1] * b[-1])


@dataclass
class FlopCounter:
    """FLOPs by op start time, gathered while the trace streams by."""

    ts: array[float] = field(default_factory=lambda: array("d"))
    flops: array[float] = field(default_factory=lambda: array("d"))
    by_precision: dict[str, float] = field(default_factory=dict)  # FLOPs of matmuls by their inputs' type
    gemm_time: dict[str, float] = field(default_factory=dict)  # GEMM kernel time by the precision its name says
    sources: set[str] = field(default_factory=set)
    convolutions: int = 0  # conv ops seen: their FLOPs are in the trace only with with_flops

    def add_op(self, name: str, ts: float, counted: Any, dims: msgspec.Raw, types: msgspec.Raw) -> None:
        flops = counted if isinstance(counted, int | float) and not isinstance(counted, bool) else None
        if name in _CONVOLUTIONS:
            self.convolutions += 1
        source = "with_flops"
        if not flops and name in _MATMULS:
            shapes = _dims(dims)
            flops = _matmul_flops(name, shapes) if shapes is not None else None
            source = "record_shapes"
        if not flops or not math.isfinite(flops) or flops <= 0:
            return
        self.ts.append(ts)
        self.flops.append(float(flops))
        self.sources.add(source)
        if name in _MATMULS:
            kinds = _dims(types)
            first = kinds[0] if kinds else None
            if isinstance(first, str):
                precision = _PRECISION.get(first, first)
                self.by_precision[precision] = self.by_precision.get(precision, 0.0) + float(flops)


# GEMM kernels name their precision more often than not (cutlass_80_tensorop_bf16_s16816gemm..., sm90_xmma_gemm_
# f16f16_f16f32..., volta_sgemm_128x64_nn): the fallback when the ops' input types were not recorded.
_GEMM = re.compile(r"gemm|cutlass|xmma|matmul|wgmma|cublas", re.IGNORECASE)
_NAMED_PRECISION = [(re.compile(p, re.IGNORECASE), precision) for p, precision in (
    (r"e4m3|e5m2|fp8", "fp8"), (r"bf16|bfloat16", "bf16"), (r"tf32", "tf32"),
    (r"f16|fp16|half|(?:^|_)h\d{3,5}gemm", "fp16"), (r"sgemm|fp32|f32", "fp32"))]


def kernel_precision(name: str) -> str | None:
    """The precision a GEMM kernel's name states, or None (not a GEMM, or not said)."""
    if not _GEMM.search(name):
        return None
    return next((precision for pattern, precision in _NAMED_PRECISION if pattern.search(name)), None)


@dataclass
class Achieved:
    tflops: float | None
    mfu_pct: float | None
    source: str | None  # "with_flops", "record_shapes (matmuls only)", both, or None
    precision: str | None
    peak_tflops: float | None
    device: str | None
    note: str | None  # why a figure is missing


def achieved(counter: FlopCounter, start: float, end: float, device_name: str | None) -> Achieved:
    """TFLOP/s of the ops that start in [start, end) (microseconds), and MFU where the device and precision
    are known."""
    if not counter.ts or end <= start:
        return Achieved(None, None, None, None, None, device_name,
                        "no FLOP counts (with_flops=True) or matmul shapes (record_shapes=True) in the trace: "
                        "achieved TFLOP/s and MFU cannot be told")
    total = sum(f for t, f in zip(counter.ts, counter.flops, strict=True) if start <= t < end)
    if total <= 0:  # counted ops, none in the window (or all of zero FLOPs): no figure, which is not 0 TFLOP/s
        return Achieved(None, None, None, None, None, device_name,
                        f"the trace counts the FLOPs of {len(counter.ts)} op(s), none of them with FLOPs in the "
                        "analysed window: achieved TFLOP/s and MFU cannot be told for it")
    tflops = round(total / ((end - start) * 1e-6) / 1e12, 3)
    source = " + ".join(sorted("record_shapes (matmuls only)" if s == "record_shapes" else s
                               for s in counter.sources))
    named = counter.by_precision or counter.gemm_time
    precision = max(named, key=lambda p: named[p]) if named else None
    gemm = counter.gemm_time
    if precision == "fp32" and gemm and max(gemm, key=lambda p: gemm[p]) == "tf32":
        precision = "tf32"  # fp32 inputs, but the GEMM kernels run TF32 (allow_tf32)
    if counter.sources == {"record_shapes"} and counter.convolutions:
        return Achieved(tflops, None, source, precision, None, device_name,
                        f"{counter.convolutions} convolutions ran, whose FLOPs only with_flops=True records: "
                        f"{tflops} TFLOP/s counts the matmuls alone and MFU is not computed")
    peak = device_peak(device_name) if device_name else None
    if peak is None:
        return Achieved(tflops, None, source, precision, None, device_name,
                        f"no peak known for {device_name or 'an unnamed device'}: MFU not computed")
    if precision is None or precision not in peak.tflops:
        return Achieved(tflops, None, source, precision, None, peak.device,
                        f"the matmuls' precision ({precision or 'not recorded'}) has no peak for {peak.device}: "
                        "MFU not computed")
    top = peak.tflops[precision]
    return Achieved(tflops, round(100 * tflops / top, 2), source, precision, top, peak.device, None)
