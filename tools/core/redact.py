"""Masks token-like strings in everything a tool returns.

Profiler traces carry API tokens in their metadata blocks, logs carry environment dumps, and process
command lines carry `--token ...`. The server and CLI pass every result through `redact_value` once,
so no tool has to remember to.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "redact_text", "redact_value"]

REDACTED = "[REDACTED]"

# Known credential shapes, then generic KEY=VALUE / --key VALUE pairs whose name says secret.
_TOKEN_SHAPES = re.compile(
    r"""
    \b(?:
        hf_[A-Za-z0-9]{20,}                         # Hugging Face
      | gh[pousr]_[A-Za-z0-9]{30,}                  # GitHub
      | github_pat_[A-Za-z0-9_]{40,}
      | sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}       # OpenAI / Anthropic style
      | xox[abposr]-[A-Za-z0-9\-]{10,}              # Slack
      | AKIA[0-9A-Z]{16}                            # AWS access key id
      | AIza[0-9A-Za-z_\-]{35}                      # Google API key
      | glpat-[A-Za-z0-9_\-]{20,}                   # GitLab
      | eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}   # JWT
    )\b
    """,
    re.VERBOSE,
)
_SECRET_NAME = (
    r"[A-Za-z0-9_.\-]*(?:token|secret|passw(?:or)?d|api[_\-]?key|access[_\-]?key|credential|auth)[A-Za-z0-9_.\-]*"
)
_ASSIGNMENT = re.compile(
    rf"""(?ix)
    (?P<name>{_SECRET_NAME})
    (?P<sep>\s*[=:]\s*|\s+(?=\S))?   # NAME=value, NAME: value, --name value
    (?P<quote>["']?)
    (?P<value>(?=[^\s"',;}}]*[A-Za-z])[^\s"',;}}]{{6,}})   # secrets are not plain numbers
    """
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")


def _mask_assignment(match: re.Match[str]) -> str:
    separator = match.group("sep")
    # A value after a space is a secret only after a command-line flag (`--api-key X`); in prose ("no inter-token
    # histogram", "the auth handshake") the next word is just a word.
    if separator is None or (not separator.strip() and not match.group("name").startswith("-")):
        return match.group(0)
    return f"{match.group('name')}{match.group('sep')}{match.group('quote')}{REDACTED}"


def redact_text(text: str) -> str:
    """Return `text` with credential-looking substrings replaced by [REDACTED]."""
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _ASSIGNMENT.sub(_mask_assignment, text)


def redact_value(value: Any) -> Any:
    """Redact every string inside a JSON-like value (dicts, lists, scalars)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    return value
