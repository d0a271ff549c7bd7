"""Host-side evidence of GPU idle: where the CPU time of the job's processes goes (py-spy record), and whether the
host's disks, CPUs or memory hold it back (a live /proc sample, or iostat / vmstat captures)."""

from tools.host.host_formats import is_smi_monitor, read_smi_monitor
from tools.host.profile import ProfileCpuInput, ProfileCpuResult, profile_cpu
from tools.host.sample import SampleHostInput, SampleHostResult, sample_host

__all__ = ["ProfileCpuInput", "ProfileCpuResult", "SampleHostInput", "SampleHostResult", "is_smi_monitor",
           "profile_cpu", "read_smi_monitor", "sample_host"]
