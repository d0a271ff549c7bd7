"""GPU memory: memory snapshots, memory-viz traces, OOM messages and allocator stats, and the OOM verdict.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.memory.analyze import AnalyzeMemoryInput, AnalyzeMemoryResult, analyze_memory

__all__ = [
    "AnalyzeMemoryInput",
    "AnalyzeMemoryResult",
    "analyze_memory",
]
