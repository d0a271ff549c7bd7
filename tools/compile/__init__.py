"""torch.compile: graph breaks and recompiles from TORCH_LOGS output, with their reasons and fixes.

These names are the package's public surface: another domain imports them from here, never from its modules.
"""

from tools.compile.diagnose import DiagnoseCompileInput, DiagnoseCompileResult, diagnose_compile

__all__ = [
    "DiagnoseCompileInput",
    "DiagnoseCompileResult",
    "diagnose_compile",
]
