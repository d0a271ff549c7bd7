"""Paths as a shell means them: the CLI's relative path arguments are relative to the working directory (over MCP
they stay relative to the roots). Only the arguments the input models mark as paths (tools.core.models.IsPath)."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.core.models import InputModel, IsPath

__all__ = ["absolute_paths"]


def _is_path(annotation: object, metadata: Sequence[object] = ()) -> bool:
    if any(isinstance(m, IsPath) for m in metadata):
        return True
    return any(isinstance(a, IsPath) or _is_path(a) for a in typing.get_args(annotation))


def absolute_paths(model: type[InputModel], arguments: dict[str, Any], cwd: Path | None = None) -> dict[str, Any]:
    """The path arguments as a shell means them: a relative path (or glob) is relative to the working directory,
    not to a root. URLs (an inference server's /metrics) are left as they are; the roots check comes later, on the
    resolved path."""
    here = cwd or Path.cwd()

    def absolute(value: object) -> object:
        if isinstance(value, str) and value and "://" not in value and not value.startswith("-"):
            return str(here / Path(value).expanduser())
        return value

    fixed = dict(arguments)
    for name, field in model.model_fields.items():
        if name in fixed and _is_path(field.annotation, field.metadata):
            value = fixed[name]
            fixed[name] = [absolute(v) for v in value] if isinstance(value, list) else absolute(value)
    return fixed
