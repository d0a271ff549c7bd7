"""GPU kernels from the inside: Nsight Compute reports, ncu --csv exports and ncu text output, and the verdict per
kernel by NVIDIA's own bottleneck rule.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.kernels.analyze import AnalyzeKernelsInput, AnalyzeKernelsResult, analyze_kernels

__all__ = [
    "AnalyzeKernelsInput",
    "AnalyzeKernelsResult",
    "analyze_kernels",
]
