"""The one reader of Prometheus text expositions (a vLLM or SGLang `/metrics` page), shared by inference_metrics
and compare_runs.

Parsing is prometheus_client's own text parser (the library both servers expose their metrics with). On top of
it this module knows the serving metrics by meaning, whatever the version called them: each canonical metric
lists its names newest first (vLLM V0 / V1 renames, SGLang's names), and the first name present wins.

Series of one metric are merged: histogram buckets and counters are summed over label sets (vLLM V1 writes one
series per data-parallel `engine`), request gauges are summed and ratio gauges take the worst engine. SGLang
can repeat a scheduler gauge once per tensor/pipeline/expert rank: series that differ only by those rank labels
are the same value and are counted once. `per_engine` keeps the running / waiting / KV-cache gauges of each
engine (vLLM `engine`, SGLang `dp_rank`) to show an unbalanced data-parallel deployment.

Quantiles follow PromQL's histogram_quantile: linear interpolation inside the bucket that holds the rank, and
when the rank falls in the +Inf bucket the answer is only "at least the last finite bound" (`lower_bound`).
Two expositions of the same server give the interval between them (`Exposition.minus`): bucket, sum and
counter deltas, so quantiles and rates describe the last interval rather than everything since start.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from tools.core.errors import UnreadableInput

__all__ = [
    "Exposition", "Histogram", "Quantile", "parse_exposition", "parse_samples",
    "COUNTERS", "GAUGES", "HISTOGRAMS",
]

Engine = Literal["vllm", "sglang", "unknown"]

# Canonical metric -> the names it has had, newest first. Histograms are named without _bucket/_sum/_count,
# counters with the _total their samples carry.
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    # vLLM renamed time_per_output_token to inter_token_latency in 0.11 (both exist from 0.10); SGLang likewise.
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    "queue": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "prompt_tokens": ("vllm:request_prompt_tokens",),
    "generation_tokens": ("vllm:request_generation_tokens",),
}
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "swapped": ("vllm:num_requests_swapped",),
    # A ratio 0-1 despite "perc": kv_cache_usage_perc from vLLM 0.9.2, gpu_cache_usage_perc before (gone in
    # 0.12); SGLang's token_usage is the share of the KV pool in use.
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    # V0's and SGLang's own hit-rate gauges (0-1); V1 has counters instead.
    "prefix_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
    "retracted_now": ("sglang:num_retracted_reqs",),
    "gen_throughput": ("sglang:gen_throughput",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    # SGLang retracts (its preemption) instead of preempting.
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    # Tokens from 0.9.2; blocks in 0.8.x (gpu_ names, deprecated 0.9.2). Hits and queries are taken as a pair.
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "cached_tokens": ("sglang:cached_tokens_total",),
}
# Gauges that are a count of requests (summed over engines); the others are ratios (the worst engine counts).
_SUMMED_GAUGES = frozenset({"running", "waiting", "swapped", "retracted_now", "gen_throughput"})
_PER_ENGINE_GAUGES = ("running", "waiting", "kv_usage")
# Labels that repeat one scheduler's value per parallel rank (SGLang): not distinct series.
_RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"})
_ENGINE_LABELS = ("engine", "dp_rank")
_BUCKET_SUFFIX, _SUM_SUFFIX, _COUNT_SUFFIX = "_bucket", "_sum", "_count"

LabelKey = tuple[tuple[str, str], ...]
T = TypeVar("T")


@dataclass(frozen=True)
class Quantile:
    """A latency quantile in seconds; `lower_bound` when the rank fell in the +Inf bucket (the true value is at
    least `value`, the last finite bound)."""

    value: float
    lower_bound: bool = False


@dataclass(frozen=True)
class Histogram:
    """One histogram merged over its series: finite upper bounds ascending, then +Inf, with cumulative counts."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float  # the _sum of the observations

    @property
    def count(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None

    def quantile(self, q: float) -> Quantile | None:
        """PromQL histogram_quantile(q); None without observations."""
        if not self.cumulative or self.count <= 0 or not 0 <= q <= 1:
            return None
        rank = q * self.count
        for i, (bound, cumulative) in enumerate(zip(self.bounds, self.cumulative, strict=True)):
            if cumulative < rank:
                continue
            if math.isinf(bound):
                finite = [b for b in self.bounds if not math.isinf(b)]
                return Quantile(finite[-1] if finite else math.inf, lower_bound=True)
            below = self.cumulative[i - 1] if i else 0.0
            lower = self.bounds[i - 1] if i else min(0.0, bound)
            in_bucket = cumulative - below
            if in_bucket <= 0:
                return Quantile(bound)
            return Quantile(lower + (bound - lower) * (rank - below) / in_bucket)
        return None  # unreachable for a well-formed histogram (+Inf holds the count)

    def minus(self, earlier: Histogram) -> Histogram | None:
        """The observations made after `earlier` (same metric, later scrape); None when the buckets differ or a
        count went down (the server restarted between the scrapes)."""
        if earlier.bounds != self.bounds:
            return None
        deltas = tuple(now - before for now, before in zip(self.cumulative, earlier.cumulative, strict=True))
        if any(d < 0 for d in deltas):
            return None
        return Histogram(self.bounds, deltas, max(self.total - earlier.total, 0.0))


@dataclass
class Exposition:
    """A parsed exposition: canonical metric -> merged value, and which name each was read from."""

    engine: Engine
    histograms: dict[str, Histogram] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    per_engine: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: int = 0
    restarted: bool = False  # set by minus(): a counter or bucket went down between the scrapes

    def minus(self, earlier: Exposition) -> Exposition:
        """This (later) scrape less `earlier`: histograms and counters of the interval, gauges as now."""
        interval = Exposition(self.engine, gauges=dict(self.gauges), names=dict(self.names),
                              per_engine={k: dict(v) for k, v in self.per_engine.items()}, samples=self.samples)
        for name, histogram in self.histograms.items():
            before = earlier.histograms.get(name)
            delta = histogram.minus(before) if before is not None else None
            if delta is None and before is not None:
                interval.restarted = True
            if delta is not None:
                interval.histograms[name] = delta
        for name, value in self.counters.items():
            before_value = earlier.counters.get(name)
            if before_value is None:
                continue
            if value < before_value:
                interval.restarted = True
                continue
            interval.counters[name] = value - before_value
        return interval


@dataclass
class _Series:
    buckets: dict[float, float] = field(default_factory=dict)
    total: float = 0.0


def _key(labels: dict[str, str], drop: Iterable[str] = ()) -> LabelKey:
    dropped = set(drop)
    return tuple(sorted((k, v) for k, v in labels.items() if k not in dropped))


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a text exposition as (name, labels, value): the parse all readers of /metrics pages share
    (serving metrics here, dcgm-exporter's in tools/gpu/activity_formats.py)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [(s.name, dict(s.labels), float(s.value)) for family in text_string_to_metric_families(text)
                for s in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise UnreadableInput(f"not a Prometheus text exposition: {_first_bad_line(text) or exc}.",
                              "Pass the raw /metrics page (curl -s http://HOST:PORT/metrics > metrics.txt).") from exc


def _first_bad_line(text: str) -> str | None:
    """Where the parser failed (it does not say): the first line that fails on its own."""
    from prometheus_client.parser import text_string_to_metric_families

    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except (ValueError, TypeError, IndexError):
            shown = line if len(line) <= 120 else line[:120] + "…"
            return f"unparseable line {number}: {shown!r}"
    return None


def _dedupe_ranks(series: dict[LabelKey, T]) -> dict[LabelKey, T]:
    """One value per label set once the parallel-rank labels are dropped (the lowest rank's)."""
    kept: dict[LabelKey, tuple[LabelKey, T]] = {}
    for key, value in series.items():
        reduced = tuple(kv for kv in key if kv[0] not in _RANK_LABELS)
        ranks = tuple(kv for kv in key if kv[0] in _RANK_LABELS)
        if reduced not in kept or ranks < kept[reduced][0]:
            kept[reduced] = (ranks, value)
    return {k: v for k, (_, v) in kept.items()}


def parse_exposition(text: str) -> Exposition:
    """Parse a /metrics page of vLLM or SGLang; UnreadableInput when it is not a text exposition, or holds no
    serving metric of either engine."""
    samples = parse_samples(text)
    plain: dict[str, dict[LabelKey, float]] = defaultdict(dict)
    histograms: dict[str, dict[LabelKey, _Series]] = defaultdict(lambda: defaultdict(_Series))
    histogram_names = {name for names in HISTOGRAMS.values() for name in names}
    for name, labels, value in samples:
        if name.endswith(_BUCKET_SUFFIX) and "le" in labels and name[: -len(_BUCKET_SUFFIX)] in histogram_names:
            try:
                bound = float(labels["le"])
            except ValueError:
                continue
            histograms[name[: -len(_BUCKET_SUFFIX)]][_key(labels, ("le",))].buckets[bound] = value
        elif name.endswith(_SUM_SUFFIX) and name[: -len(_SUM_SUFFIX)] in histogram_names:
            histograms[name[: -len(_SUM_SUFFIX)]][_key(labels)].total = value
        elif not name.endswith(_COUNT_SUFFIX) and not name.endswith("_created"):
            plain[name][_key(labels)] = value
    exposition = Exposition(engine=_engine_of(name for name, _, _ in samples), samples=len(samples))
    for canonical, names in HISTOGRAMS.items():
        chosen = next((n for n in names if histograms.get(n)), None)
        if chosen is not None and (merged := _merge_histogram(histograms[chosen])) is not None:
            exposition.histograms[canonical] = merged
            exposition.names[canonical] = chosen
    for canonical, names in GAUGES.items():
        chosen = next((n for n in names if plain.get(n)), None)
        if chosen is None:
            continue
        series = _dedupe_ranks(plain[chosen])
        values = list(series.values())
        exposition.gauges[canonical] = sum(values) if canonical in _SUMMED_GAUGES else max(values)
        exposition.names[canonical] = chosen
        if canonical in _PER_ENGINE_GAUGES:
            for key, value in series.items():
                engine = next((v for k, v in key if k in _ENGINE_LABELS), None)
                if engine is not None:
                    row = exposition.per_engine.setdefault(engine, {})
                    row[canonical] = row.get(canonical, 0.0) + value if canonical != "kv_usage" else max(
                        row.get(canonical, 0.0), value)
    _read_counters(exposition, plain)
    if not exposition.histograms and not exposition.gauges and not exposition.counters:
        raise UnreadableInput(f"the exposition ({len(samples)} samples) holds no vLLM or SGLang serving metric "
                              "(vllm:* or sglang:*).",
                              "Scrape the inference server's own /metrics (SGLang needs --enable-metrics).")
    return exposition


def _read_counters(exposition: Exposition, plain: dict[str, dict[LabelKey, float]]) -> None:
    pairs = {"prefix_hits": "prefix_queries"}
    for canonical, names in COUNTERS.items():
        if canonical == "prefix_queries":
            continue  # read with its pair below
        for position, name in enumerate(names):
            if not plain.get(name):
                continue
            if canonical in pairs:
                partner = COUNTERS[pairs[canonical]][position]
                if not plain.get(partner):
                    continue  # hits without queries of the same generation give no rate
                exposition.counters[pairs[canonical]] = sum(_dedupe_ranks(plain[partner]).values())
                exposition.names[pairs[canonical]] = partner
            exposition.counters[canonical] = sum(_dedupe_ranks(plain[name]).values())
            exposition.names[canonical] = name
            break


def _merge_histogram(series: dict[LabelKey, _Series]) -> Histogram | None:
    buckets: dict[float, float] = defaultdict(float)
    total = 0.0
    for one in _dedupe_ranks(series).values():
        if math.inf not in one.buckets:
            continue  # a histogram without its +Inf bucket has no count: malformed, skipped
        for bound, value in one.buckets.items():
            buckets[bound] += value
        total += one.total
    if not buckets:
        return None
    bounds = tuple(sorted(buckets))
    return Histogram(bounds, tuple(buckets[b] for b in bounds), total)


def _engine_of(names: Iterable[str]) -> Engine:
    vllm = sglang = 0
    for name in names:
        vllm += name.startswith("vllm:")
        sglang += name.startswith("sglang:")
    if not vllm and not sglang:
        return "unknown"
    return "vllm" if vllm >= sglang else "sglang"
