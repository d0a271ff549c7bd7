"""nvidia_smi_query: `nvidia-smi --query-gpu=<allow-listed fields> --format=csv,noheader,nounits`, sampled a
bounded number of times (the safe replacement for `watch nvidia-smi` and `-l`), parsed into typed rows
with a min/median/max summary, and checked against the same thresholds as health_check.

Also reads a CSV capture made elsewhere (csv_path), with or without header and units; a capture of `-l` / `-lms`
is a series (one row per GPU per sample, told apart by index or bus id). Without the nvidia-smi binary it serves the
same fields from NVML where it can, and says so. A series of utilization.gpu is searched for periodic dips
(tools/core/periodic.py: a checkpoint, an eval or a drained prefetch buffer every N steps).
SOP: entry health checks; straggler (clocks, temperature, power, links); gpu_utilization_low.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
import time
from collections import defaultdict
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, Field, model_validator

from tools.core.context import ToolContext
from tools.core.errors import BadInput, TriageError, Unavailable, UnreadableInput
from tools.core.files import read_regular
from tools.core.limits import (
    SMI_MAX_CSV_BYTES,
    SMI_MAX_FIELDS,
    SMI_MAX_GPU_INDEX,
    SMI_MAX_INTERVAL_S,
    SMI_MAX_ROWS_RETURNED,
    SMI_MAX_SAMPLES,
    SMI_MAX_SAMPLING_S,
    SMI_MIN_INTERVAL_S,
)
from tools.core.models import (
    Coverage,
    CoverageStatus,
    Finding,
    InputModel,
    NameArg,
    NextStep,
    PathArg,
    Severity,
    Table,
    ToolResult,
    worst,
)
from tools.core.periodic import DIPS_FIX, PeriodicDips, dips_across, dips_evidence
from tools.core.proc import run_program
from tools.core.thresholds import UTIL_LOW_PCT, UTIL_MIN_SAMPLES
from tools.gpu import nvml as _nvml
from tools.gpu.checks import GpuValues, by_severity, gpu_findings
from tools.gpu.smi_fields import (
    DEFAULT_APP_FIELDS,
    DEFAULT_GPU_FIELDS,
    FieldKind,
    canonical,
    field_kind,
)
from tools.steps import mean_step_time

__all__ = ["NvidiaSmiQueryInput", "NvidiaSmiQueryResult", "nvidia_smi_query", "parse_smi_csv"]

Value = int | float | str | None
QueryKind = Literal["gpu", "compute_apps"]

_ONE_RUN_TIMEOUT_S = 15.0
# What nvidia_smi_query reads, named on an input that gave it nothing to judge.
_FORMATS = ("nvidia-smi --query-gpu=... --format=csv (header or not, units or not; -l series)",
            "nvidia-smi --query-compute-apps=... --format=csv", "live nvidia-smi, or NVML without it")
_STATIC_MARKERS = (".max", "total", "limit", "count")
_MISSING = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost|"
                      r"Requested functionality has been deprecated)\]?$", re.IGNORECASE)
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_VALUE_UNIT = re.compile(r"^(-?[0-9]+(?:\.[0-9]+)?)\s*(?:[A-Za-z%/]+)?$")


class NvidiaSmiQueryInput(InputModel):
    query: QueryKind = Field(default="gpu", description="'gpu' (--query-gpu) or 'compute_apps' "
                             "(--query-compute-apps: processes using the GPUs).")
    fields: list[NameArg] = Field(
        default_factory=list, max_length=SMI_MAX_FIELDS,
        description="Documented query field names, e.g. utilization.gpu, temperature.gpu, clocks.sm, "
        "clocks_throttle_reasons.active. Empty: a triage set (utilisation, memory, temperature, power, "
        "clocks, PCIe link, throttle reasons, ECC).",
    )
    gpus: list[int] = Field(default_factory=list, max_length=64,
                            description=f"GPU indices to query (0-{SMI_MAX_GPU_INDEX}); empty: all.")
    count: int = Field(default=1, ge=1, le=SMI_MAX_SAMPLES, description="Number of samples.")
    interval_s: float = Field(default=1.0, ge=SMI_MIN_INTERVAL_S, le=SMI_MAX_INTERVAL_S,
                              description="Seconds between samples.")
    csv_path: PathArg | None = Field(
        default=None,
        description="Parse this saved nvidia-smi CSV (inside the roots) instead of running nvidia-smi. "
        "With a header line the fields come from it; without one, pass `fields` in capture order. "
        "A capture of -l / -lms is read as a series (interval from its timestamp column, else interval_s).",
    )
    step_logs: list[PathArg] = Field(default_factory=list, max_length=32, description="The job's step logs (or a "
                                     "glob): a periodic dip in utilisation is then also given in steps.")

    @model_validator(mode="after")
    def _check(self) -> NvidiaSmiQueryInput:
        unknown = [f for f in self.fields if canonical(f, self.query) is None]
        if unknown:
            raise ValueError(
                f"not documented {self.query} query fields: {', '.join(unknown)} "
                "(see `nvidia-smi --help-query-gpu`; e.g. utilization.gpu, memory.used, temperature.gpu)"
            )
        if any(not 0 <= g <= SMI_MAX_GPU_INDEX for g in self.gpus):
            raise ValueError(f"GPU indices must be 0-{SMI_MAX_GPU_INDEX}")
        if (self.count - 1) * self.interval_s > SMI_MAX_SAMPLING_S:
            raise ValueError(
                f"sampling {self.count} x {self.interval_s:g} s would take longer than {SMI_MAX_SAMPLING_S:g} s; "
                "lower count or interval_s"
            )
        return self


class SmiRow(BaseModel):
    sample: int = Field(description="0-based sample number.")
    values: dict[str, Value] = Field(description="Field -> parsed value; None when nvidia-smi had none.")
    missing: dict[str, str] = Field(default_factory=dict, description="Field -> why it has no value.")


class FieldSummary(BaseModel):
    gpu: str = Field(description="GPU index (or bus id / row key) the figures are for.")
    field: str
    min: float
    median: float
    max: float
    samples: int


class NvidiaSmiQueryResult(ToolResult):
    source: str = Field(description="'nvidia-smi', 'nvml (nvidia-smi not on PATH)', or 'file'.")
    query: QueryKind
    fields: list[str]
    samples: int
    sampled_at: str
    findings: list[Finding]
    summary: list[FieldSummary]
    periodic: PeriodicDips | None = Field(default=None, description="The deepest periodic dip in a GPU's "
                                          "utilization.gpu series (every N steps: checkpoint, eval, logging).")
    rows: list[SmiRow]

    narrow_hint = "pass fewer fields or gpus, or lower count"

    def tables(self) -> list[Table]:
        sampled = self.samples > 1
        return [
            Table("Findings", ["check", "value", "threshold", "severity", "meaning", "SOP branch"],
                  [[f.check, f.value, f.threshold, f.severity.value, f.meaning, f.sop_branch or ""]
                   for f in self.findings], "findings"),
            Table("Per-GPU summary over samples", ["gpu", "field", "min", "median", "max", "samples"],
                  [[s.gpu, s.field, f"{s.min:g}", f"{s.median:g}", f"{s.max:g}", str(s.samples)]
                   for s in self.summary], "summary"),
            Table(f"nvidia-smi --query-{self.query.replace('_', '-')}",
                  (["sample"] if sampled else []) + self.fields,
                  [([str(r.sample)] if sampled else []) + [_show(r, f) for f in self.fields] for r in self.rows],
                  "rows"),
        ]


def _show(row: SmiRow, field: str) -> str:
    value = row.values.get(field)
    if value is None:
        return f"[{row.missing.get(field, 'N/A')}]"
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------- parsing (the one CSV parser)


_CELLS_KEPT = 65_536  # distinct parsed cells one capture's parse keeps (memory bound)


def _parse_value(raw: str, kind: FieldKind) -> tuple[Value, str | None]:
    text = raw.strip()
    missing = _MISSING.match(text)
    if missing:
        return None, missing.group(1)
    if kind in ("int", "float"):
        match = _VALUE_UNIT.match(text)
        if not match:
            return None, f"unparsed {text[:40]!r}"
        number = float(match.group(1))
        return (int(number) if kind == "int" and number.is_integer() else number), None
    return text, None


def parse_smi_csv(
    text: str, fields: list[str] | None, query: QueryKind, sample: int = 0
) -> tuple[list[str], list[SmiRow]]:
    """Parse nvidia-smi CSV (header or not, units or not). Returns the field names and typed rows."""
    if "\x00" in text or text.count("\ufffd") > len(text) // 100:
        raise UnreadableInput("not nvidia-smi CSV output (the file is binary).",
                              "Pass a file captured with nvidia-smi --query-gpu=... --format=csv.")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return fields or [], []
    try:
        reader = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    except csv.Error as exc:
        raise UnreadableInput(f"not nvidia-smi CSV output ({exc}).",
                              "Pass a file captured with nvidia-smi --query-gpu=... --format=csv.") from exc
    first = [cell.strip() for cell in reader[0]]
    has_header = all(canonical(_HEADER_UNIT.sub("", cell), query) is not None for cell in first)
    if has_header:
        names = [_HEADER_UNIT.sub("", cell) for cell in first]
        body = reader[1:]
        if fields:
            # Keep the asked-for columns of a wide capture, matched by documented name.
            wanted = {canonical(name, query): position for position, name in enumerate(names)}
            absent = [f for f in fields if canonical(f, query) not in wanted]
            if absent:
                raise BadInput(f"the capture has no column for {', '.join(absent)}.",
                               f"Its columns are: {', '.join(names[:40])}{' ...' if len(names) > 40 else ''}.")
            positions = [wanted[canonical(f, query)] for f in fields]
            names = list(fields)
            body = [[row[p] for p in positions] if len(row) == len(first) else row for row in body]
    elif fields:
        names, body = list(fields), reader
    else:
        raise BadInput(
            "the CSV has no header line, so its columns are unknown.",
            "Pass `fields` in the order of the capture's --query-gpu list.",
        )
    rows: list[SmiRow] = []
    kinds = [field_kind(name, query) for name in names]
    # A capture repeats its cells (a GPU's name and uuid on every row, the same clocks): each distinct one parsed once.
    parsed: dict[tuple[str, FieldKind], tuple[Value, str | None]] = {}
    for number, cells in enumerate(body, start=2 if has_header else 1):
        if len(cells) != len(names):
            raise UnreadableInput(
                f"line {number} has {len(cells)} values but {len(names)} fields were expected.",
                "Check that `fields` matches the capture's --query-gpu list, in order.",
            )
        values: dict[str, Value] = {}
        missing: dict[str, str] = {}
        for name, kind, cell in zip(names, kinds, cells, strict=True):
            found = parsed.get((cell, kind))
            if found is None:
                found = _parse_value(cell, kind)
                if len(parsed) < _CELLS_KEPT:
                    parsed[(cell, kind)] = found
            value, reason = found
            values[name] = value
            if reason:
                missing[name] = reason
        rows.append(SmiRow(sample=sample, values=values, missing=missing))
    return names, rows


# ---------------------------------------------------------------- sources


async def _run_once(params: NvidiaSmiQueryInput, fields: list[str], ctx: ToolContext, sample: int) -> list[SmiRow]:
    flag = "--query-gpu" if params.query == "gpu" else "--query-compute-apps"
    args = [f"{flag}={','.join(fields)}", "--format=csv,noheader,nounits"]
    if params.gpus:
        args += ["-i", ",".join(str(g) for g in params.gpus)]
    output = await run_program("nvidia-smi", args, timeout_s=min(_ONE_RUN_TIMEOUT_S, ctx.remaining_s()))
    text = output.stdout.decode("utf-8", "replace")
    if output.returncode != 0:
        message = (output.stderr.decode("utf-8", "replace") or text).strip().splitlines()
        raise Unavailable(
            f"nvidia-smi exited with {output.returncode}: {message[0] if message else 'no message'}.",
            "If it names a field, that field is not supported by this driver: drop it from `fields`.",
        )
    return parse_smi_csv(text, fields, params.query, sample)[1]


def _nvml_values(device: _nvml.NvmlDevice, driver: str | None) -> dict[str, tuple[Value, str | None]]:
    """The query fields NVML can serve, by canonical name."""
    def v(value: object) -> tuple[Value, str | None]:
        if isinstance(value, _nvml.Missing):
            return None, value.reason
        if isinstance(value, bool):
            return ("Yes" if value else "No"), None
        return value, None  # type: ignore[return-value]

    mask = device.throttle_reasons_mask
    return {
        "index": (device.index, None),
        "driver_version": (driver, None if driver else "unknown"),
        "name": v(device.name),
        "uuid": v(device.uuid),
        "pci.bus_id": v(device.bus_id),
        "utilization.gpu": v(device.utilization_gpu_pct),
        "utilization.memory": v(device.utilization_memory_pct),
        "memory.used": v(device.memory_used_mib),
        "memory.total": v(device.memory_total_mib),
        "temperature.gpu": v(device.temperature_c),
        "power.draw": v(device.power_draw_w),
        "enforced.power.limit": v(device.power_limit_w),
        "power.limit": v(device.power_limit_w),
        "clocks.current.sm": v(device.sm_clock_mhz),
        "clocks.max.sm": v(device.sm_clock_max_mhz),
        "pcie.link.gen.current": v(device.pcie_gen_current),
        "pcie.link.gen.max": v(device.pcie_gen_max),
        "pcie.link.width.current": v(device.pcie_width_current),
        "pcie.link.width.max": v(device.pcie_width_max),
        "clocks_event_reasons.active": (None, mask.reason) if isinstance(mask, _nvml.Missing)
        else (f"0x{mask:016x}", None),
        "ecc.errors.uncorrected.volatile.total": v(device.ecc_uncorrected_volatile),
        "retired_pages.pending": v(device.retired_pages_pending),
        "remapped_rows.uncorrectable": v(device.remapped_rows_uncorrectable),
        "remapped_rows.pending": v(device.remapped_rows_pending),
        "remapped_rows.failure": v(device.remapped_rows_failure),
    }


def _read_nvml_rows(params: NvidiaSmiQueryInput, fields: list[str], sample: int) -> list[SmiRow]:
    rows: list[SmiRow] = []
    with _nvml.open_session() as session:
        driver = session.driver_version()
        driver_text = None if isinstance(driver, _nvml.Missing) else driver
        indices = params.gpus or list(range(session.device_count()))
        for index in indices:
            device = session.device(index)
            if params.query == "gpu":
                served = _nvml_values(device, driver_text)
                values: dict[str, Value] = {}
                missing: dict[str, str] = {}
                for name in fields:
                    value, reason = served.get(canonical(name, "gpu") or name, (None, "not served from NVML"))
                    values[name] = value
                    if reason:
                        missing[name] = reason
                rows.append(SmiRow(sample=sample, values=values, missing=missing))
                continue
            procs = device.processes if isinstance(device.processes, list) else []
            bus = None if isinstance(device.bus_id, _nvml.Missing) else device.bus_id
            uuid = None if isinstance(device.uuid, _nvml.Missing) else device.uuid
            for proc in procs:
                served_app: dict[str, Value] = {"pid": proc.pid, "used_gpu_memory": proc.used_memory_mib,
                                                "gpu_bus_id": bus, "gpu_uuid": uuid, "process_name": None}
                app_values = {n: served_app.get(canonical(n, "compute_apps") or n) for n in fields}
                rows.append(SmiRow(sample=sample, values=app_values,
                                   missing={n: "not served from NVML" for n, val in app_values.items()
                                            if val is None}))
    return rows


# ---------------------------------------------------------------- analysis


def _numeric(value: Value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


_HEX_MASK = re.compile(r"0x[0-9a-fA-F]{1,16}")  # clocks_event_reasons.active as nvidia-smi prints it
_GPU_KEYS = ("index", "pci.bus_id", "gpu_bus_id", "uuid")


def _row_key(row: SmiRow, position: int) -> str:
    for key in _GPU_KEYS:
        if row.values.get(key) is not None:
            return str(row.values[key])
    return str(position)


def _summaries(rows: list[SmiRow], fields: list[str], samples: int) -> list[FieldSummary]:
    if samples < 2:
        return []
    series: dict[tuple[str, str], list[float]] = defaultdict(list)
    per_sample_position: dict[int, int] = defaultdict(int)
    for row in rows:
        position = per_sample_position[row.sample]
        per_sample_position[row.sample] += 1
        key = _row_key(row, position)
        for name in fields:
            number = _numeric(row.values.get(name))
            if number is not None and name not in ("index", "count", "pid"):
                series[(key, name)].append(number)
    return [
        FieldSummary(gpu=key, field=name, min=min(vals), median=statistics.median(vals), max=max(vals),
                     samples=len(vals))
        for (key, name), vals in series.items()
        # Limits and capacities do not move between samples; listing them only hides what does.
        if not (min(vals) == max(vals) and any(s in name for s in _STATIC_MARKERS))
    ]


def _gpu_values(rows: list[SmiRow]) -> list[GpuValues]:
    """Per GPU, the median of each numeric field over samples and the throttle reasons seen most."""
    by_gpu: dict[str, list[SmiRow]] = defaultdict(list)
    position: dict[int, int] = defaultdict(int)
    for row in rows:
        by_gpu[_row_key(row, position[row.sample])].append(row)
        position[row.sample] += 1
    values: list[GpuValues] = []
    for order, (key, gpu_rows) in enumerate(by_gpu.items()):
        def med(*names: str, _rows: list[SmiRow] = gpu_rows) -> float | None:
            # The rows of one GPU share their field names: each name's spelling is looked up once, not once a row.
            spelled = [s for name in names if canonical(name, "gpu") and (s := _spelling(tuple(_rows[0].values), name))]
            numbers = [n for r in _rows for name in spelled if (n := _numeric(r.values.get(name))) is not None]
            return statistics.median(numbers) if numbers else None

        reasons: list[str] | None = None
        masks = [m for r in gpu_rows if isinstance(m := _lookup(r, "clocks_event_reasons.active"), str)
                 and _HEX_MASK.fullmatch(m.strip())]
        if masks:
            counts: dict[str, int] = defaultdict(int)
            for mask in masks:
                for bit, name in _nvml.THROTTLE_REASON_BITS.items():
                    if int(mask, 16) & bit:
                        counts[name] += 1
            reasons = [n for n, c in counts.items() if c * 2 >= len(masks)]
        index = int(key) if key.isdigit() and len(key) <= 6 else order

        def as_int(x: float | None) -> int | None:
            return None if x is None else int(x)

        values.append(GpuValues(
            index=index, utilization_gpu_pct=med("utilization.gpu"), memory_used_mib=med("memory.used"),
            memory_total_mib=med("memory.total"), sm_clock_mhz=med("clocks.current.sm"),
            sm_clock_max_mhz=med("clocks.max.sm"), temperature_c=med("temperature.gpu"),
            power_draw_w=med("power.draw"), power_limit_w=med("enforced.power.limit") or med("power.limit"),
            throttle_reasons=reasons, pcie_gen_current=as_int(med("pcie.link.gen.current")),
            pcie_gen_max=as_int(med("pcie.link.gen.max")), pcie_width_current=as_int(med("pcie.link.width.current")),
            pcie_width_max=as_int(med("pcie.link.width.max")),
            ecc_uncorrected_volatile=as_int(med("ecc.errors.uncorrected.volatile.total")),
        ))
    return values


def _lookup(row: SmiRow, canonical_name: str) -> Value:
    """The row's value for a canonical field, whichever spelling the query used."""
    name = _spelling(tuple(row.values), canonical_name)
    return row.values.get(name) if name is not None else None


@lru_cache(maxsize=256)  # the rows of one capture share their field names: found once, not once a row
def _spelling(names: tuple[str, ...], canonical_name: str) -> str | None:
    return next((name for name in names if canonical(name, "gpu") == canonical_name), None)


def _utilisation_findings(gpus: list[GpuValues], samples: int) -> list[Finding]:
    if samples < UTIL_MIN_SAMPLES:
        return []
    low = [g for g in gpus if g.utilization_gpu_pct is not None and g.utilization_gpu_pct < UTIL_LOW_PCT]
    return [
        Finding(check=f"GPU {g.index} utilisation (median of {samples})", value=f"{g.utilization_gpu_pct:g}%",
                threshold=f"< {UTIL_LOW_PCT:g}% sustained", severity=Severity.warn,
                meaning="the GPU has no kernel running much of the time: profile a few steps to see why",
                sop_branch="gpu_utilization_low")
        for g in low
    ]


# ---------------------------------------------------------------- the tool


async def nvidia_smi_query(params: NvidiaSmiQueryInput, ctx: ToolContext) -> NvidiaSmiQueryResult:
    """Query nvidia-smi for allow-listed fields, sampled `count` times `interval_s` apart (bounded: the
    safe replacement for `watch nvidia-smi` / `-l`), parsed into typed rows with per-GPU min/median/max
    and threshold findings (temperature, throttle reasons, clocks, power cap, PCIe link, ECC, sustained
    low utilisation; fewer than 5 samples cannot show it, so utilisation alone read once is unknown).
    query='compute_apps' lists the processes on the GPUs. csv_path parses a saved capture instead.
    Falls back to NVML when nvidia-smi is not installed. Read-only.
    """
    default = DEFAULT_GPU_FIELDS if params.query == "gpu" else DEFAULT_APP_FIELDS
    fields = list(params.fields or default)
    sampled_at = datetime.now(UTC).isoformat(timespec="seconds")
    rows: list[SmiRow] = []
    samples = params.count
    if params.csv_path is not None:
        path = ctx.path(params.csv_path)
        size = path.stat().st_size
        if size > SMI_MAX_CSV_BYTES:
            raise BadInput(f"{params.csv_path} is {size} bytes; the limit is {SMI_MAX_CSV_BYTES}.",
                           "Trim the capture to the samples of interest.")
        text = read_regular(path, SMI_MAX_CSV_BYTES + 1, params.csv_path).decode("utf-8", errors="replace")
        fields, rows = parse_smi_csv(text, list(params.fields) or None, params.query)
        if not rows:
            raise UnreadableInput(f"{params.csv_path} holds no rows of nvidia-smi output"
                                  + (" (only its header line)." if text.strip() else " (it is empty)."),
                                  "Pass the capture the job's node wrote: nvidia-smi --query-gpu=... --format=csv.")
        samples, source = _number_samples(rows), "file"
        interval = _capture_interval(rows) or params.interval_s
    else:
        source = "nvidia-smi"
        started = time.monotonic()
        for sample in range(params.count):
            if sample:
                await anyio.sleep(params.interval_s)
            try:
                if source == "nvidia-smi":
                    rows += await _run_once(params, fields, ctx, sample)
                    continue
            except Unavailable as exc:
                if "not found on PATH" not in exc.message:
                    raise
                source = "nvml (nvidia-smi not on PATH)"
            try:
                rows += await anyio.to_thread.run_sync(_read_nvml_rows, params, fields, sample,
                                                       abandon_on_cancel=True)
            except TriageError as exc:
                raise Unavailable(
                    f"nvidia-smi not found on PATH and {exc.message.rstrip('.')}.",
                    "Run this on a GPU node, or pass csv_path with a capture made there "
                    "(nvidia-smi --query-gpu=... --format=csv).",
                ) from exc
        # The real spacing: each sample's nvidia-smi run adds to the sleep.
        interval = (time.monotonic() - started) / max(params.count, 1)
    gpus = _gpu_values(rows) if params.query == "gpu" else []
    findings = by_severity(gpu_findings(gpus) + _utilisation_findings(gpus, samples)) if gpus else []
    periodic, notes = (await anyio.to_thread.run_sync(_periodic_dips, rows, samples, interval, params, ctx)
                       if params.query == "gpu" else (None, []))
    if periodic is not None:
        findings.insert(next((i for i, f in enumerate(findings) if f.severity is not Severity.crit), len(findings)),
                        Finding(check=f"{periodic.series} periodic dips", value=dips_evidence(periodic),
                                threshold=">= 3 cycles above the noise", severity=Severity.warn,
                                meaning=DIPS_FIX.lower(), sop_branch="gpu_utilization_low"))
    coverage = _coverage(params, fields, rows, samples, source)
    severity = worst(f.severity for f in findings)
    one_reading = _one_reading_of_utilisation(params, fields, samples)
    conclusion = _conclude(findings, rows, samples, source, one_reading)
    decides: str | None = None
    if coverage.status is CoverageStatus.not_understood and severity is Severity.ok:
        severity = Severity.unknown
        conclusion = [f"{len(rows)} row(s) from {source}, but {_sentence(coverage.detail)}: nothing to judge.",
                      "Ask for fields this GPU and driver report (N/A means they do not expose them)."]
        decides = "The same query on fields that have values here, e.g. utilization.gpu, temperature.gpu, clocks.sm."
    elif one_reading is not None and severity is Severity.ok and not findings:
        # Utilisation is all that could be judged here, and one reading cannot show it low for long.
        severity = Severity.unknown
        conclusion = [f"{len(rows)} row(s) from {source} over {samples} sample(s): {one_reading}.",
                      f"Sample with count>={UTIL_MIN_SAMPLES} (or a -l capture) for a utilisation verdict."]
        decides = (f"nvidia_smi_query count={2 * UTIL_MIN_SAMPLES} interval_s=0.5 "
                   "fields=index,utilization.gpu,clocks.sm: a sustained series.")
    return NvidiaSmiQueryResult(
        severity=severity,
        conclusion=conclusion,
        next_steps=_next_steps(findings, samples, source, one_reading is not None),
        coverage=[coverage],
        decides=decides,
        source=source,
        query=params.query,
        fields=fields,
        samples=samples,
        sampled_at=sampled_at,
        findings=findings,
        summary=_summaries(rows, fields, samples),
        periodic=periodic,
        notes=notes + ([f"rows: the last {SMI_MAX_ROWS_RETURNED} of {len(rows)} are returned; the summary and the "
                        "periodic search cover them all."] if len(rows) > SMI_MAX_ROWS_RETURNED else []),
        rows=rows[-SMI_MAX_ROWS_RETURNED:],
    )


def _sentence(text: str) -> str:
    return text[:1].lower() + text[1:].rstrip(".")


def _coverage(params: NvidiaSmiQueryInput, fields: list[str], rows: list[SmiRow], samples: int,
              source: str) -> Coverage:
    """What the query read: every asked field with a value somewhere (read), some fields N/A in every row
    (partial: named), or no value at all (not understood: nothing to judge)."""
    where = (params.csv_path if params.csv_path is not None else "NVML" if source.startswith("nvml")
             else "nvidia-smi")
    if not rows:
        return Coverage.not_understood(where, f"{source} returned no rows (no GPU matched)", _FORMATS)
    empty = [f for f in fields if all(row.values.get(f) is None for row in rows)]
    read = f"{len(rows)} row(s), {samples} sample(s) of {len(fields)} field(s)"
    if len(empty) == len(fields):
        reasons = sorted({r for row in rows for r in row.missing.values()})
        return Coverage.not_understood(where, f"no field has a value in any row ({', '.join(reasons[:3])})",
                                       _FORMATS)
    if empty:
        shown = ", ".join(empty[:6]) + (f" and {len(empty) - 6} more" if len(empty) > 6 else "")
        return Coverage.partial(where, f"{read}; no value in any row for {len(empty)} field(s): {shown}")
    return Coverage.read(where, read)


def _one_reading_of_utilisation(params: NvidiaSmiQueryInput, fields: list[str], samples: int) -> str | None:
    """Why utilisation cannot be judged: it was asked for, but too few samples show no more than a moment."""
    if params.query != "gpu" or samples >= UTIL_MIN_SAMPLES:
        return None
    if not any(canonical(f, "gpu") == "utilization.gpu" for f in fields):
        return None
    return (f"{samples} reading(s) of utilization.gpu show a moment, not a sustained low utilisation "
            f"(needs >= {UTIL_MIN_SAMPLES} samples)")


def _number_samples(rows: list[SmiRow]) -> int:
    """A saved capture's rows numbered by sample: `-l` writes one row per GPU per sample, so the n-th row of a GPU
    (by index or bus id) is its n-th sample; without such a column, a new timestamp starts a new sample. Rows that
    neither tells apart count as one sample."""
    seen: dict[str, int] = defaultdict(int)
    if all(_gpu_key(row) is not None for row in rows):
        for row in rows:
            key = str(_gpu_key(row))
            row.sample = seen[key]
            seen[key] += 1
        return max(seen.values(), default=1)
    stamps = [_lookup(row, "timestamp") for row in rows]
    if not rows or not all(isinstance(stamp, str) for stamp in stamps):
        return 1
    sample = 0
    for position, row in enumerate(rows):
        if position and stamps[position] != stamps[position - 1]:
            sample += 1
        row.sample = sample
    return sample + 1


def _gpu_key(row: SmiRow) -> str | None:
    return next((str(row.values[k]) for k in _GPU_KEYS if row.values.get(k) is not None), None)


_TIMESTAMP = re.compile(r"(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?")


def _capture_interval(rows: list[SmiRow]) -> float | None:
    """The median spacing of one GPU's rows by the capture's timestamp column (nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm)."""
    stamps: dict[str, list[float]] = defaultdict(list)
    in_sample: dict[int, int] = defaultdict(int)
    for row in rows:
        position = in_sample[row.sample]
        in_sample[row.sample] += 1
        raw = _lookup(row, "timestamp")
        match = _TIMESTAMP.fullmatch(raw.strip()) if isinstance(raw, str) else None
        if match is None:
            continue
        try:
            year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
            moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
        except ValueError:
            continue
        stamps[_row_key(row, position)].append(moment + float("0." + (match.group(7) or "0")))
    gaps = sorted(b - a for series in stamps.values() for a, b in zip(series, series[1:], strict=False) if b > a)
    return gaps[len(gaps) // 2] if gaps else None


def _periodic_dips(rows: list[SmiRow], samples: int, interval: float, params: NvidiaSmiQueryInput,
                   ctx: ToolContext) -> tuple[PeriodicDips | None, list[str]]:
    """The deepest periodic dip among the GPUs' utilization.gpu series, with the notes of the ones without."""
    series: dict[str, list[float]] = defaultdict(list)
    position: dict[int, int] = defaultdict(int)
    for row in rows:
        number = _numeric(_lookup(row, "utilization.gpu"))
        key = _row_key(row, position[row.sample])
        position[row.sample] += 1
        if number is not None:
            series[key].append(number)
    if samples < 2 * UTIL_MIN_SAMPLES or not series:
        return None, []
    steps, note = (mean_step_time(params.step_logs, ctx, time.monotonic() + ctx.remaining_s()) if params.step_logs
                   else (None, None))
    found, notes = dips_across([(values, interval, f"GPU {key} utilisation") for key, values in series.items()],
                               steps, notes_up_to=2)
    if found and note is not None:
        notes.append(note)
    if len(found) > 1:  # the deepest is `periodic`; the others are named here
        notes.append(f"{len(found)} GPUs dip periodically: " + "; ".join(dips_evidence(d) for d in found[1:4]) + ".")
    return (found[0] if found else None), notes


def _conclude(findings: list[Finding], rows: list[SmiRow], samples: int, source: str,
              one_reading: str | None) -> list[str]:
    problems = [f for f in findings if f.severity is not Severity.ok]
    first = f"{len(rows)} row(s) from {source} over {samples} sample(s)."
    if not problems:
        tail = "No threshold crossed." if findings else "No GPU thresholds apply to these fields."
        if one_reading is not None and findings:
            tail += f" But {one_reading}: sample with count>={UTIL_MIN_SAMPLES} for that verdict."
        return [first, tail]
    lead = problems[0]
    return [first, f"{len(problems)} problem(s); worst: {lead.check} = {lead.value} ({lead.severity.value}).",
            f"It means: {lead.meaning}."]


def _next_steps(findings: list[Finding], samples: int, source: str, utilisation_asked: bool) -> list[NextStep]:
    branches = list(dict.fromkeys(f.sop_branch for f in findings if f.severity is not Severity.ok and f.sop_branch))
    steps = [NextStep.from_sop(b, done={"nvidia_smi_query"}) for b in branches[:3]]
    if not steps and samples < UTIL_MIN_SAMPLES and (source != "file" or utilisation_asked):
        steps.append(NextStep(branch="gpu_utilization_low", step="sample",
                              action="nvidia_smi_query count=20 interval_s=0.5 fields=utilization.gpu,clocks.sm",
                              why="A sustained sample separates a low-utilisation job from a momentary dip."))
    if not steps:
        steps.append(NextStep(branch="triage", step="plan", action="triage_plan(symptom=<the user's words>)",
                              why="The GPUs look healthy here, so the cause is likely in the job itself."))
    return steps
