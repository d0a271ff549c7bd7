"""GPU and host health: NVML (the one seam to the driver), the bounded nvidia-smi query, what the SMs really do
(GPM, DCGM), and the checks that turn GPU and host values into findings.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.gpu.activity import GpuActivityInput, GpuActivityResult, gpu_activity
from tools.gpu.checks import GpuValues, gpu_findings
from tools.gpu.health import HealthCheckInput, HealthCheckResult, gpu_values, health_check
from tools.gpu.smi_query import NvidiaSmiQueryInput, NvidiaSmiQueryResult, nvidia_smi_query

__all__ = [
    "GpuActivityInput",
    "GpuActivityResult",
    "GpuValues",
    "HealthCheckInput",
    "HealthCheckResult",
    "NvidiaSmiQueryInput",
    "NvidiaSmiQueryResult",
    "gpu_activity",
    "gpu_findings",
    "gpu_values",
    "health_check",
    "nvidia_smi_query",
]
