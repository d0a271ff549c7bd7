"""The allow-list of `nvidia-smi --query-gpu` and `--query-compute-apps` fields, with how to parse each.

Only documented query fields are accepted (see `nvidia-smi --help-query-gpu`); anything else is
refused before nvidia-smi runs, so user text never reaches its command line unchecked.
Kinds: int and float are numbers (units stripped), hex is a bit mask like 0x0000000000000004,
active is 'Active' / 'Not Active', text is kept as is.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from importlib import resources
from typing import Final, Literal

__all__ = ["DEFAULT_APP_FIELDS", "DEFAULT_GPU_FIELDS", "FieldKind", "canonical", "field_kind"]

FieldKind = Literal["int", "float", "hex", "active", "text"]

_KINDS: Final[dict[str, FieldKind]] = {
    "int": "int", "float": "float", "hex": "hex", "bool_active": "active", "str": "text", "enum": "text",
}


@cache
def _tables() -> dict[str, tuple[dict[str, FieldKind], dict[str, str]]]:
    """query -> (documented field -> kind, alias -> documented field), from smi_fields.json.

    The JSON lists the field names of `nvidia-smi --help-query-gpu` / `--help-query-compute-apps` as
    printed by drivers 470 to 610 (sources inside it), with a kind read from the help text and real
    captures. Fields are data, not code, so a newer driver's fields are one JSON edit away.
    """
    raw = json.loads(resources.files(__package__).joinpath("smi_fields.json").read_text("utf-8"))
    tables: dict[str, tuple[dict[str, FieldKind], dict[str, str]]] = {}
    for query in ("gpu", "compute_apps"):
        kinds = {name: _KINDS[spec["kind"]] for name, spec in raw[query].items()}
        aliases = {alias: name for name, spec in raw[query].items() for alias in spec.get("aliases", [])}
        tables[query] = (kinds, aliases)
    return tables


# Spellings every driver since R470 accepts (clocks_event_reasons.* needs R535+).
DEFAULT_GPU_FIELDS: Final = (
    "index", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu", "power.draw",
    "enforced.power.limit", "clocks.sm", "clocks.max.sm", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "clocks_throttle_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
)
DEFAULT_APP_FIELDS: Final = ("gpu_bus_id", "pid", "process_name", "used_gpu_memory")


@lru_cache(maxsize=4096)  # called for every field of every row: a long -l capture has millions
def canonical(field: str, query: Literal["gpu", "compute_apps"]) -> str | None:
    """The documented name for `field` (aliases resolved), or None if it is not on the allow-list."""
    kinds, aliases = _tables()[query]
    name = field.strip()
    if name in kinds:
        return name
    return aliases.get(name)


def field_kind(field: str, query: Literal["gpu", "compute_apps"]) -> FieldKind:
    """How to parse a value of `field`; text when the field is unknown."""
    name = canonical(field, query)
    return _tables()[query][0][name] if name else "text"
