"""inference_metrics: why a vLLM or SGLang server is slow, from its Prometheus /metrics page.

The page comes from a file inside the roots, or is scraped over HTTP from loopback or a host the caller allows
explicitly (no redirects, no proxies, a size cap and a deadline). One scrape describes everything since the
server started; two scrapes `interval_s` apart (or a file and a `later` file) describe the last interval: the
histogram bucket deltas give its latency quantiles, the counter deltas its rates. Names across versions (vLLM
V0/V1, the KV-cache, prefix-cache and inter-token renames, SGLang) are resolved in tools/serving/prometheus.py.

Verdicts (the SOP's rules, sop/branches/inference_latency.toml): kv_cache_pressure (usage near full, preemptions
or retractions), queueing (requests waiting, growing, or queue time most of TTFT), prefill_bound (TTFT over its
target with a short queue), decode_bound (inter-token latency over its target), none.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import BaseModel, Field

from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, Unavailable, UnreadableInput
from tools.core.files import read_regular
from tools.core.limits import (
    INFER_MAX_ALLOWED_HOSTS,
    INFER_MAX_BYTES,
    INFER_MAX_INTERVAL_S,
    INFER_MAX_TARGET_S,
    INFER_MIN_INTERVAL_S,
    INFER_MIN_TARGET_S,
    INFER_SCRAPE_TIMEOUT_S,
    MAX_PATH_CHARS,
)
from tools.core.models import (
    Coverage,
    InputModel,
    NameArg,
    NextStep,
    PathArg,
    Severity,
    Table,
    ToolResult,
    cell,
    worst,
)
from tools.core.thresholds import (
    INFER_CRIT_FACTOR,
    INFER_ITL_TARGET_S,
    INFER_MIN_REQUESTS,
    INFER_TTFT_TARGET_S,
    KV_CACHE_WARN_PCT,
    PREFIX_HIT_LOW_PCT,
    QUEUE_SHARE_OF_TTFT,
)
from tools.core.urls import checked_url, opener
from tools.serving.prometheus import Exposition, Histogram, parse_exposition

__all__ = ["InferenceMetricsInput", "InferenceMetricsResult", "fetch_exposition", "inference_metrics"]

Kind = Literal["kv_cache_pressure", "queueing", "prefill_bound", "decode_bound"]
Verdict = Literal["kv_cache_pressure", "queueing", "prefill_bound", "decode_bound", "none"]
# When several kinds are found at one severity: KV pressure first (preempted requests are recomputed, which
# inflates every latency), then queueing (it inflates TTFT), then the compute-bound ones.
_PRIORITY: tuple[Kind, ...] = ("kv_cache_pressure", "queueing", "prefill_bound", "decode_bound")
_BRANCH = "inference_latency"
_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
_MIN_SCRAPE_S = 1.0  # time left for each of the two scrapes, at least
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class InferenceMetricsInput(InputModel):
    source: str = Field(min_length=1, max_length=MAX_PATH_CHARS,
                        description="The server's metrics: http(s)://HOST:PORT/metrics (loopback, or a host in "
                        "allow_host) or a saved exposition file inside the roots.")
    later: PathArg | None = Field(default=None, description="A later saved exposition of the same server: the "
                                  "interval between the two files is analysed (rates need interval_s).")
    interval_s: float | None = Field(default=None, ge=INFER_MIN_INTERVAL_S, le=INFER_MAX_INTERVAL_S,
                                     description="URL: scrape twice this many seconds apart and report the last "
                                     "interval. Files: the seconds between source and later (for rates).")
    allow_host: list[NameArg] = Field(default_factory=list, max_length=INFER_MAX_ALLOWED_HOSTS,
                                      description="Hosts besides loopback that may be scraped (exact names or "
                                      "addresses as written in the URL).")
    ttft_target_s: float = Field(default=INFER_TTFT_TARGET_S, ge=INFER_MIN_TARGET_S, le=INFER_MAX_TARGET_S,
                                 description="The time-to-first-token p90 target (SLO), seconds.")
    itl_target_s: float = Field(default=INFER_ITL_TARGET_S, ge=INFER_MIN_TARGET_S, le=INFER_MAX_TARGET_S,
                                description="The inter-token latency (TPOT) p90 target, seconds.")

    cli_positional = "source"


class LatencyQuantiles(BaseModel):
    p50: float | None = Field(description="Seconds; None without observations.")
    p90: float | None
    p99: float | None
    lower_bound: bool = Field(description="True when a quantile fell in the +Inf bucket: it is at least the value "
                              "shown (the last finite bucket bound).")
    lower_bound_quantiles: list[str] = Field(default_factory=list, description="Which quantiles are lower bounds.")
    mean: float | None = Field(description="_sum / _count, seconds.")
    count: float = Field(description="Observations (requests, or tokens for inter-token latency).")
    window: Literal["interval", "since_start"]
    metric: str = Field(description="The exposition's name for it.")


class Latency(BaseModel):
    ttft_s: LatencyQuantiles | None = Field(description="Time to first token.")
    itl_s: LatencyQuantiles | None = Field(description="Inter-token latency (time per output token).")
    e2e_s: LatencyQuantiles | None = Field(description="End-to-end request latency.")
    queue_s: LatencyQuantiles | None = Field(default=None, description="Time in the waiting queue (newer versions).")


class Throughput(BaseModel):
    generation_tokens_per_s: float | None
    prompt_tokens_per_s: float | None
    requests_per_s: float | None = Field(description="Requests finished per second (e2e histogram count).")


class LatencyFinding(BaseModel):
    kind: Kind
    severity: Severity
    cause: str = Field(description="What the kind means for the server, in one sentence.")
    evidence: str
    fix: str
    verify: str
    sop_branch: str = _BRANCH


class EngineRow(BaseModel):
    engine: str = Field(description="vLLM's `engine` label or SGLang's `dp_rank`.")
    running: float | None
    waiting: float | None
    kv_cache_usage_pct: float | None


class InferenceMetricsResult(ToolResult):
    engine: Literal["vllm", "sglang", "unknown"]
    source: str
    scrapes: int = Field(description="1: since the server started; 2: the interval between the scrapes.")
    interval_s: float | None = Field(description="Seconds between the two scrapes (None with one).")
    verdict: Verdict
    latency: Latency
    running: float | None = Field(description="Requests running now (all engines).")
    waiting: float | None = Field(description="Requests waiting now (all engines).")
    waiting_before: float | None = Field(default=None, description="Waiting at the first scrape (two scrapes).")
    kv_cache_usage_pct: float | None = Field(description="KV-cache usage now, the fullest engine, percent.")
    preemptions: float | None = Field(description="Preemptions (vLLM) or retracted requests (SGLang): in the "
                                      "interval with two scrapes, else since start.")
    prefix_cache_hit_pct: float | None
    throughput: Throughput
    findings: list[LatencyFinding]
    engines: list[EngineRow] = Field(description="Per data-parallel engine, when there are several.")

    narrow_hint = "the tables are short; raise the byte budget (--max-bytes) to see every engine"

    def tables(self) -> list[Table]:
        def row(name: str, q: LatencyQuantiles | None) -> list[str]:
            if q is None:
                return [name, "-", "-", "-", "-", "0", "not exposed"]
            at_least = set(q.lower_bound_quantiles)
            shown = [(">= " if key in at_least else "") + _seconds(getattr(q, key)) for key, _ in _QUANTILES]
            return [name, *shown, _seconds(q.mean), f"{q.count:.0f}", f"{q.metric} ({q.window.replace('_', ' ')})"]

        lat = self.latency
        state = [["running", cell(self.running)], ["waiting", _waiting(self.waiting, self.waiting_before)],
                 ["KV-cache usage", _pct(self.kv_cache_usage_pct)], ["preemptions / retractions", cell(
                     self.preemptions)], ["prefix-cache hit rate", _pct(self.prefix_cache_hit_pct)],
                 ["generation tokens/s", cell(self.throughput.generation_tokens_per_s)],
                 ["prompt tokens/s", cell(self.throughput.prompt_tokens_per_s)],
                 ["requests/s", _rate(self.throughput.requests_per_s)]]
        return [
            Table("Findings", ["kind", "severity", "evidence", "fix", "verify"],
                  [[f.kind, f.severity.value, f.evidence, f.fix, f.verify] for f in self.findings], "findings"),
            Table("Latency", ["metric", "p50", "p90", "p99", "mean", "count", "series"],
                  [row("TTFT", lat.ttft_s), row("inter-token", lat.itl_s), row("end-to-end", lat.e2e_s),
                   *([row("queue", lat.queue_s)] if lat.queue_s else [])]),
            Table("Serving state", ["measure", "value"], state),
            Table("Engines", ["engine", "running", "waiting", "KV-cache usage"],
                  [[e.engine, cell(e.running), cell(e.waiting), _pct(e.kv_cache_usage_pct)] for e in self.engines],
                  "engines"),
        ]


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _waiting(now: float | None, before: float | None) -> str:
    if now is None:
        return "-"
    return f"{now:.0f} (was {before:.0f})" if before is not None else f"{now:.0f}"


# ------------------------------------------------------------------------------------------------ reading


def _scrape(url: str, timeout_s: float) -> str:
    """GET `url` with no proxy and no redirect; at most INFER_MAX_BYTES, all within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    # Plain text exposition, uncompressed: no OpenMetrics or protobuf negotiation, no gzip bomb.
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4",
                                                   "Accept-Encoding": "identity"})
    try:
        with opener().open(request, timeout=timeout_s) as response:
            declared = response.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > INFER_MAX_BYTES:
                raise LimitExceeded(f"{url} declares {int(declared)} bytes; the limit is {INFER_MAX_BYTES}.",
                                    "Save the page with curl and filter it to the vllm:/sglang: lines.")
            chunks: list[bytes] = []
            size = 0
            while chunk := response.read1(64 * 1024):  # what has arrived: a dripping body meets the deadline
                size += len(chunk)
                if size > INFER_MAX_BYTES:
                    raise LimitExceeded(f"{url} sent more than {INFER_MAX_BYTES} bytes; reading stopped there.",
                                        "Save the page with curl and filter it to the vllm:/sglang: lines.")
                if time.monotonic() > deadline:
                    raise LimitExceeded(f"{url} did not finish sending within {timeout_s:g} s.",
                                        "Check the server's load, or save the page with curl and pass the file.")
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise UnreadableInput(f"{url} answered HTTP {exc.code} {exc.reason}.",
                              "Check the path (/metrics) and that metrics are on (SGLang: --enable-metrics).") from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise LimitExceeded(f"{url} did not answer within {timeout_s:g} s.", "Check the server.") from exc
        raise Unavailable(f"cannot reach {url}: {reason}.",
                          "Check the host and port the server listens on (vLLM: --port, SGLang: --port).") from exc
    except TimeoutError as exc:
        raise LimitExceeded(f"{url} did not answer within {timeout_s:g} s.", "Check the server.") from exc
    except OSError as exc:
        raise Unavailable(f"cannot read {url}: {exc}.", "Check the host and port.") from exc
    return b"".join(chunks).decode("utf-8", "replace")


def _read_file(raw: str, ctx: ToolContext) -> str:
    path = ctx.path(raw)
    if path.is_dir():
        raise BadInput(f"{raw!r} is a folder.", "Pass the saved /metrics page, or its URL.")
    data = read_regular(path, INFER_MAX_BYTES + 1)
    if len(data) > INFER_MAX_BYTES:
        raise LimitExceeded(f"{path.name} is larger than {INFER_MAX_BYTES} bytes.",
                            "Filter it to the vllm:/sglang: lines (grep -E '^(# [A-Z]+ )?(vllm|sglang):').")
    if b"\x00" in data[:8192]:
        raise UnreadableInput(f"{path.name} is binary, not a text exposition.", "Pass the raw /metrics page.")
    return data.decode("utf-8", "replace")


def _is_url(source: str) -> bool:
    return _URL_SCHEME.match(source) is not None


async def fetch_exposition(source: str, ctx: ToolContext, allow_host: list[str] | None = None) -> str:
    """The text of one exposition: scraped (loopback or `allow_host` only) or read from a file in the roots."""
    if not _is_url(source):
        return _read_file(source, ctx)
    url = checked_url(source, allow_host or [])
    timeout_s = min(INFER_SCRAPE_TIMEOUT_S, ctx.remaining_s())
    try:
        with anyio.fail_after(timeout_s + 1):
            return await anyio.to_thread.run_sync(_scrape, url, timeout_s, abandon_on_cancel=True)
    except TimeoutError as exc:
        raise LimitExceeded(f"{url} did not answer within {timeout_s:g} s.", "Check the server.") from exc


# ------------------------------------------------------------------------------------------------ analysis


@dataclass
class _Window:
    """What the verdict reads: the interval (two scrapes) with since-start fallbacks, and the gauges now."""

    now: Exposition
    interval: Exposition | None
    before: Exposition | None
    seconds: float | None


def _quantiles(histogram: Histogram, window: Literal["interval", "since_start"], metric: str) -> LatencyQuantiles:
    values: dict[str, float | None] = {}
    bounded: list[str] = []
    for key, q in _QUANTILES:
        found = histogram.quantile(q)
        values[key] = found.value if found else None
        if found and found.lower_bound:
            bounded.append(key)
    return LatencyQuantiles(p50=values["p50"], p90=values["p90"], p99=values["p99"], lower_bound=bool(bounded),
                            lower_bound_quantiles=bounded, mean=histogram.mean, count=histogram.count, window=window,
                            metric=metric)


def _latency_of(window: _Window, canonical: str, notes: list[str]) -> LatencyQuantiles | None:
    metric = window.now.names.get(canonical)
    if metric is None:
        return None
    if window.interval is not None:
        interval = window.interval.histograms.get(canonical)
        if interval is not None and interval.count > 0:
            return _quantiles(interval, "interval", metric)
        notes.append(f"{metric}: nothing observed in the interval; shown since the server started.")
    return _quantiles(window.now.histograms[canonical], "since_start", metric)


def _counter(window: _Window, canonical: str) -> float | None:
    source = window.interval if window.interval is not None else window.now
    return source.counters.get(canonical)


def _prefix_hit_pct(window: _Window) -> float | None:
    hits, queries = _counter(window, "prefix_hits"), _counter(window, "prefix_queries")
    if hits is not None and queries:
        return 100.0 * hits / queries
    rate = window.now.gauges.get("prefix_hit_rate")
    if rate is not None:
        return 100.0 * rate
    cached, prompt = _counter(window, "cached_tokens"), _counter(window, "prompt_tokens")
    return 100.0 * cached / prompt if cached is not None and prompt else None


def _throughput(window: _Window) -> Throughput:
    if window.interval is None or not window.seconds:
        gen = window.now.gauges.get("gen_throughput")  # SGLang's own recent rate
        return Throughput(generation_tokens_per_s=gen, prompt_tokens_per_s=None, requests_per_s=None)
    seconds = window.seconds
    e2e = window.interval.histograms.get("e2e")

    def rate(canonical: str) -> float | None:
        value = window.interval.counters.get(canonical) if window.interval else None
        return None if value is None else value / seconds

    return Throughput(generation_tokens_per_s=rate("generation_tokens"), prompt_tokens_per_s=rate("prompt_tokens"),
                      requests_per_s=e2e.count / seconds if e2e is not None else None)


_CAUSES: dict[Kind, str] = {
    "kv_cache_pressure": "The KV cache is nearly full: requests are preempted (vLLM) or retracted (SGLang) and "
    "recomputed, which inflates every latency.",
    "queueing": "Requests wait for a slot: the offered load exceeds what the server admits, so TTFT is mostly queue.",
    "prefill_bound": "Prompt processing (prefill) is slow with a short queue: long prompts, little prefix reuse or "
    "a small prefill budget.",
    "decode_bound": "Token generation is slow: the decode batch is too big for the latency target (memory-bandwidth "
    "bound).",
}
_FIXES: dict[str, dict[Kind, str]] = {
    "vllm": {
        "kv_cache_pressure": "Give the KV cache more memory (--gpu-memory-utilization up to ~0.95), lower "
        "--max-num-seqs / --max-num-batched-tokens or --max-model-len, store the cache in FP8 (--kv-cache-dtype "
        "fp8), or add tensor/pipeline parallelism.",
        "queueing": "Offered load exceeds capacity: add replicas or data parallelism (--data-parallel-size), "
        "rate-limit at the gateway, and check that --max-num-seqs does not cap the running batch.",
        "prefill_bound": "Raise --max-num-batched-tokens (the chunked-prefill budget: larger favours TTFT), turn on "
        "prefix caching (--enable-prefix-caching) when prompts share a prefix, add tensor parallelism or FP8 "
        "weights (--quantization fp8) for long prompts.",
        "decode_bound": "Lower --max-num-seqs (a smaller decode batch), try speculative decoding "
        "(--speculative-config), more tensor parallelism, or FP8 weights / KV cache; if ITL spikes when long "
        "prompts arrive, lower --max-num-batched-tokens (smaller prefill chunks).",
    },
    "sglang": {
        "kv_cache_pressure": "Give the KV pool more memory (--mem-fraction-static), lower --max-running-requests "
        "or --context-length, store the cache in FP8 (--kv-cache-dtype fp8_e5m2), or add --tp; retracted requests "
        "are recomputed.",
        "queueing": "Offered load exceeds capacity: add replicas or --dp, rate-limit at the gateway, and check that "
        "--max-running-requests does not cap the running batch.",
        "prefill_bound": "Raise --chunked-prefill-size (larger favours TTFT), keep the radix cache on (no "
        "--disable-radix-cache) for shared prefixes, add --tp or FP8 weights (--quantization fp8) for long prompts.",
        "decode_bound": "Lower --max-running-requests (a smaller decode batch), try speculative decoding "
        "(--speculative-algorithm EAGLE), more --tp, or FP8 weights / KV cache; if ITL spikes when long prompts "
        "arrive, lower --chunked-prefill-size.",
    },
}


def _verify(kind: Kind, params: InferenceMetricsInput) -> str:
    call = "inference_metrics with interval_s=30 at the same load"
    return {
        "kv_cache_pressure": f"{call}: no preemptions in the interval and KV-cache usage below {KV_CACHE_WARN_PCT:g} %",
        "queueing": f"{call}: waiting stays at 0 and TTFT p90 falls below {params.ttft_target_s:g} s",
        "prefill_bound": f"{call}: TTFT p90 below {params.ttft_target_s:g} s",
        "decode_bound": f"{call}: inter-token p90 below {params.itl_target_s * 1000:g} ms",
    }[kind]


def _over(q: LatencyQuantiles | None, target: float) -> Severity | None:
    """How far the p90 is over `target` (a lower bound counts: the true value is at least that)."""
    if q is None or q.p90 is None or q.p90 <= target:
        return None
    return Severity.crit if q.p90 >= INFER_CRIT_FACTOR * target else Severity.warn


def _p90_text(name: str, q: LatencyQuantiles) -> str:
    at_least = ">= " if "p90" in q.lower_bound_quantiles else ""
    return f"{name} p90 {at_least}{_seconds(q.p90)} ({q.window.replace('_', ' ')}, n={q.count:.0f})"


def _findings(window: _Window, latency: Latency, result: dict[str, Any],
              params: InferenceMetricsInput) -> list[LatencyFinding]:
    fixes = _FIXES["sglang" if window.now.engine == "sglang" else "vllm"]
    found: list[LatencyFinding] = []

    def add(kind: Kind, severity: Severity, evidence: str, extra_fix: str = "") -> None:
        found.append(LatencyFinding(kind=kind, severity=severity, cause=_CAUSES[kind], evidence=evidence,
                                    fix=(extra_fix + " " + fixes[kind]).strip(), verify=_verify(kind, params)))

    kv, preempted = result["kv_cache_usage_pct"], result["preemptions"]
    retracting = window.now.gauges.get("retracted_now") or 0
    window_text = "in the interval" if window.interval is not None else "since start"
    if (kv is not None and kv >= KV_CACHE_WARN_PCT) or preempted or retracting:
        parts = [f"KV-cache usage {kv:.1f} % (>= {KV_CACHE_WARN_PCT:g} %)" if kv is not None else ""]
        if preempted:
            parts.append(f"{preempted:.0f} {'retractions' if window.now.engine == 'sglang' else 'preemptions'} "
                         f"{window_text}")
        if retracting:
            parts.append(f"{retracting:.0f} requests retracted now")
        severe = bool(preempted or retracting) and (kv is None or kv >= KV_CACHE_WARN_PCT or
                                                    window.interval is not None)
        add("kv_cache_pressure", Severity.crit if severe else Severity.warn, "; ".join(p for p in parts if p))

    ttft, queue = latency.ttft_s, latency.queue_s
    waiting, before = result["waiting"], result["waiting_before"]
    ttft_over = _over(ttft, params.ttft_target_s)
    queue_share = (queue.mean / ttft.mean if queue is not None and ttft is not None and queue.mean is not None and
                   ttft.mean else None)
    queued_now = waiting is not None and waiting > 0
    queue_dominates = queue_share is not None and queue_share >= QUEUE_SHARE_OF_TTFT
    if queued_now or (ttft_over and queue_dominates):
        grew = before is not None and waiting is not None and waiting > before
        parts = [f"{waiting:.0f} requests waiting" + (f" (was {before:.0f}: growing)" if grew else "")
                 if waiting is not None else ""]
        if result["running"] is not None:
            parts.append(f"{result['running']:.0f} running")
        if queue_share is not None:
            parts.append(f"queue time {100 * queue_share:.0f} % of mean TTFT")
        if ttft is not None and ttft.p90 is not None:
            parts.append(_p90_text("TTFT", ttft))
        add("queueing", Severity.crit if grew or ttft_over else Severity.warn, "; ".join(p for p in parts if p))
    elif ttft_over and ttft is not None:
        hit = result["prefix_cache_hit_pct"]
        parts = [_p90_text("TTFT", ttft) + f" over the {params.ttft_target_s:g} s target",
                 f"{waiting:.0f} waiting" if waiting is not None else "waiting not exposed"]
        if queue_share is not None:
            parts.append(f"queue time {100 * queue_share:.0f} % of mean TTFT")
        if hit is not None:
            parts.append(f"prefix-cache hit rate {hit:.1f} %")
        extra = (f"The prefix-cache hit rate is {hit:.1f} % (< {PREFIX_HIT_LOW_PCT:g} %): check that prompts share "
                 "a prefix and caching is on." if hit is not None and hit < PREFIX_HIT_LOW_PCT else "")
        add("prefill_bound", ttft_over, "; ".join(parts), extra)

    itl_over = _over(latency.itl_s, params.itl_target_s)
    if itl_over and latency.itl_s is not None:
        parts = [_p90_text("inter-token", latency.itl_s) + f" over the {params.itl_target_s * 1000:g} ms target"]
        if result["running"] is not None:
            parts.append(f"{result['running']:.0f} requests in the batch")
        add("decode_bound", itl_over, "; ".join(parts))
    return sorted(found, key=lambda f: (-f.severity.rank, _PRIORITY.index(f.kind)))


_STATE: dict[Kind, str] = {"kv_cache_pressure": "short of KV cache", "queueing": "queueing requests",
                           "prefill_bound": "prefill-bound", "decode_bound": "decode-bound"}


def _conclusion(result: dict[str, Any], findings: list[LatencyFinding], window: _Window) -> list[str]:
    engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(result["engine"], "The server")
    span = (f"over the last {window.seconds:g} s" if window.interval is not None and window.seconds
            else "over the last interval" if window.interval is not None else "since the server started")
    if not findings:
        ttft = result["latency"].ttft_s
        shown = f" (TTFT p90 {_seconds(ttft.p90)})" if ttft is not None and ttft.p90 is not None else ""
        return [f"{engine} meets the latency targets {span}{shown}: no queueing, KV-cache pressure or slow "
                "prefill/decode found.", "If users still see latency, measure outside the engine (gateway, "
                "tokenisation, network): compare e2e with TTFT + ITL x output tokens."]
    first = findings[0]
    text = [f"{engine} is {_STATE[first.kind]} {span}: {first.evidence}.",
            f"Try: {first.fix.rstrip('.')}."]
    if len(findings) > 1:
        text.append("Also: " + ", ".join(f.kind.replace("_", " ") for f in findings[1:]) + ".")
    return text


def _coverage(where: str, page: Exposition, latency: Latency, scraped_apart_s: float | None) -> Coverage:
    """One page: read when it has the latency histograms the verdicts use, partial (naming what it lacks) else."""
    engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(page.engine, "unknown-engine")
    scrapes = f"2 scrapes {scraped_apart_s:g} s apart; " if scraped_apart_s is not None else ""
    detail = (f"{scrapes}{engine} exposition, {page.samples} samples: {len(page.histograms)} histogram(s), "
              f"{len(page.gauges)} gauge(s), {len(page.counters)} counter(s)")
    # "ITL", not "inter-token": the redactor reads "token <word>" as a secret.
    lacking = [name for name, q in (("TTFT", latency.ttft_s), ("ITL", latency.itl_s)) if q is None]
    if lacking:
        return Coverage.partial(where, f"{detail}; no {' or '.join(lacking)} histogram")
    return Coverage.read(where, detail)


def _too_little(latency: Latency, window: _Window) -> str | None:
    """Why the window cannot show a latency problem, or None when it can."""
    ttft, itl = latency.ttft_s, latency.itl_s
    if ttft is None and itl is None:
        return "the page has no latency histogram (only gauges and counters)"
    if window.interval is not None and all(q is None or q.window == "since_start" for q in (ttft, itl)):
        span = f"the {window.seconds:g} s" if window.seconds else "the interval"
        return f"no request finished in {span} between the scrapes (a stalled server looks the same)"
    requests = ttft.count if ttft is not None else None
    if requests is not None and requests < INFER_MIN_REQUESTS:
        where = "in the interval" if ttft is not None and ttft.window == "interval" else "since the server started"
        return f"only {requests:.0f} request(s) finished {where} (a p90 needs >= {INFER_MIN_REQUESTS})"
    return None


async def inference_metrics(params: InferenceMetricsInput, ctx: ToolContext) -> InferenceMetricsResult:
    """Why an LLM inference server (vLLM V0/V1 or SGLang) is slow, from its Prometheus /metrics: TTFT, inter-token
    and end-to-end latency p50/p90/p99 from the histograms ("at least X" when a quantile lies past the last
    bucket), running and waiting requests, KV-cache usage, preemptions, prefix-cache hit rate, throughput; and the
    verdict (kv_cache_pressure, queueing, prefill_bound, decode_bound or none) with the serving flags to try and
    how to verify. Reads a saved page inside the roots, or scrapes http://HOST:PORT/metrics on loopback or a host
    in allow_host (no redirects, size-capped); interval_s scrapes twice to describe the last interval.
    """
    url = _is_url(params.source)
    if params.later is not None and url:
        raise BadInput("later is for saved files; with a URL, pass interval_s and the tool scrapes twice.")
    if url and params.interval_s is not None and params.interval_s + 2 * _MIN_SCRAPE_S >= ctx.remaining_s():
        raise BadInput(f"interval_s={params.interval_s:g} leaves no time for two scrapes within the call's "
                       f"{ctx.timeout_s:g} s limit.", "Lower interval_s, or raise the call timeout (--timeout).")
    if not url and params.interval_s is not None and params.later is None:
        raise BadInput("interval_s with a file needs a second file (later) saved interval_s after it.",
                       "Save the page twice (curl ... > a.txt; sleep 30; curl ... > b.txt) and pass both.")
    first_text = await fetch_exposition(params.source, ctx, params.allow_host)
    first = parse_exposition(first_text)
    second: Exposition | None = None
    seconds: float | None = None
    if url and params.interval_s is not None:
        started = time.monotonic()
        await anyio.sleep(params.interval_s)
        second = parse_exposition(await fetch_exposition(params.source, ctx, params.allow_host))
        seconds = round(time.monotonic() - started, 2)
    elif params.later is not None:
        second = parse_exposition(await fetch_exposition(params.later, ctx))
        seconds = params.interval_s
    notes: list[str] = []
    now = second or first
    interval = now.minus(first) if second is not None else None
    if interval is not None and interval.restarted:
        notes.append("A counter went down between the scrapes (the server restarted): showing the later scrape "
                     "since its start.")
        interval = None
    if second is not None and second.engine != first.engine:
        raise BadInput(f"the two expositions come from different servers ({first.engine} then {second.engine}).",
                       "Scrape the same server twice.")
    window = _Window(now=now, interval=interval, before=first if second is not None else None, seconds=seconds)
    latency = Latency(ttft_s=_latency_of(window, "ttft", notes), itl_s=_latency_of(window, "itl", notes),
                      e2e_s=_latency_of(window, "e2e", notes), queue_s=_latency_of(window, "queue", notes))
    kv = now.gauges.get("kv_usage")
    values: dict[str, Any] = {
        "engine": now.engine, "latency": latency, "running": now.gauges.get("running"),
        "waiting": now.gauges.get("waiting"),
        "waiting_before": first.gauges.get("waiting") if second is not None else None,
        "kv_cache_usage_pct": None if kv is None else round(100 * kv, 2),
        "preemptions": _counter(window, "preemptions"), "prefix_cache_hit_pct": _prefix_hit_pct(window),
    }
    findings = _findings(window, latency, values, params)
    if latency.ttft_s is None and latency.itl_s is None:
        notes.append("No latency histogram was found: only the gauges were read.")
    if latency.ttft_s is not None and latency.ttft_s.count == 0:
        notes.append("No request has finished yet: send traffic, then scrape again.")
    engines = [EngineRow(engine=name, running=row.get("running"), waiting=row.get("waiting"),
                         kv_cache_usage_pct=None if row.get("kv_usage") is None else 100 * row["kv_usage"])
               for name, row in sorted(now.per_engine.items(), key=lambda item: item[0])]
    verdict: Verdict = findings[0].kind if findings else "none"
    coverage = [_coverage(params.source, first, latency, seconds if url and second is not None else None)]
    if params.later is not None and second is not None:
        coverage.append(_coverage(params.later, second, latency, None))
    severity = worst(f.severity for f in findings)
    conclusion = _conclusion(values, findings, window)
    undecided = _too_little(latency, window) if severity is Severity.ok else None
    decides: str | None = None
    if undecided is not None:
        severity = Severity.unknown
        engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(now.engine, "The server")
        conclusion = [f"{engine}: no queueing or KV-cache pressure now, but {undecided}, so latency cannot be judged.",
                      "Scrape again under the load that is slow."]
        decides = (f"inference_metrics with interval_s=30 while the server is under its slow load (at least "
                   f"{INFER_MIN_REQUESTS} requests finishing in the interval), from a page with the TTFT and "
                   "ITL histograms.")
    return InferenceMetricsResult(
        severity=severity, conclusion=conclusion, coverage=coverage, decides=decides,
        next_steps=[NextStep.from_sop(_BRANCH, done={"inference_metrics"})],
        source=params.source, scrapes=2 if second is not None else 1, interval_s=seconds, verdict=verdict,
        throughput=_throughput(window), findings=findings, engines=engines if len(engines) > 1 else [],
        notes=notes[:8], **values)
