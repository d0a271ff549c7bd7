"""Host-side evidence of GPU idle: where the CPU time of the job's processes goes (py-spy record)."""

from tools.host.profile import ProfileCpuInput, ProfileCpuResult, profile_cpu

__all__ = ["ProfileCpuInput", "ProfileCpuResult", "profile_cpu"]
