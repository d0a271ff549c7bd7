"""Errors the tools raise on purpose.

    TriageError            expected failure: the message says what went wrong, the hint what to do
    ├── BadInput           the caller's arguments are wrong (bad field, path outside the roots, ...)
    ├── Unavailable        a program, library or driver this call needs is not on this host
    ├── LimitExceeded      the call would pass, or passed, one of the limits in tools/limits.py
    └── UnreadableInput    a file was found but cannot be read or parsed as the expected format

The server turns these into MCP tool errors (text visible to the model) and the CLI into exit
code 3. Anything else is a bug: logged with its traceback on stderr, never shown to the client.
Foreign errors (OSError, NVMLError, psutil.Error, ...) are mapped to these at the seams
(core/paths, core/proc, gpu/nvml) with `raise ... from`.
"""

from __future__ import annotations

__all__ = ["BadInput", "LimitExceeded", "TriageError", "Unavailable", "UnreadableInput"]


class TriageError(Exception):
    """Base class: an expected failure with an actionable hint."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip() if self.hint else self.message


class BadInput(TriageError):
    """The arguments are wrong; the caller can fix them."""


class Unavailable(TriageError):
    """Something this call needs (nvidia-smi, NVML, py-spy, a kernel log) is missing here."""


class LimitExceeded(TriageError):
    """A wall-clock, size or count limit was reached."""


class UnreadableInput(TriageError):
    """A file exists but is not readable or not in the expected format."""
