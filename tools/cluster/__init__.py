"""Where the job runs: its rank processes on this host, and its nodes (Slurm or SSH backends) that a job-level
call collects from.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.cluster.nodes import (
    NodeBackend,
    SlurmJob,
    collect_from_nodes,
    job_backend,
    node_name,
    slurm_pids_on_this_node,
)
from tools.cluster.processes import RankProcess, discover_job, processes_by_match, processes_by_pid

__all__ = [
    "NodeBackend",
    "RankProcess",
    "SlurmJob",
    "collect_from_nodes",
    "discover_job",
    "job_backend",
    "node_name",
    "processes_by_match",
    "processes_by_pid",
    "slurm_pids_on_this_node",
]
