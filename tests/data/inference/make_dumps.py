"""Writes the vLLM exposition fixtures of this folder (see PROVENANCE.md): each version's metric names, types,
labels and bucket bounds, fed known samples, exposed by prometheus_client's own generate_latest (the library vLLM
serves /metrics with). Run from the repository root: python tests/data/inference/make_dumps.py
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

HERE = Path(__file__).resolve().parent
MODEL = "Qwen/Qwen2.5-7B-Instruct"
V0_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
V0_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
V0_E2E = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
V1_TTFT = [*V0_TTFT, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
V1_ITL = [*V0_TPOT, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
V1_E2E = [*V0_E2E, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def spread(low: float, high: float, n: int) -> list[float]:
    return [low + (high - low) * i / (n - 1) for i in range(n)]


def observe(histogram: Histogram, labels: tuple[str, ...], values: list[float]) -> None:
    for value in values:
        histogram.labels(*labels).observe(value)


def v0_6() -> bytes:
    """V0 engine (vllm/engine/metrics.py, 0.6.x): model_name label only, no _created series, KV pressure."""
    from prometheus_client import disable_created_metrics, enable_created_metrics

    disable_created_metrics()  # what V0 did at import
    try:
        r = CollectorRegistry()
        labels = ["model_name"]
        for name, doc, value in [
            ("vllm:num_requests_running", "Number of requests currently running on GPU.", 212),
            ("vllm:num_requests_swapped", "Number of requests swapped to CPU.", 0),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0),
            ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", 0.963),
            ("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", 0.0),
            ("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", -1),
            ("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", 0.42),
        ]:
            Gauge(name, doc, labels, registry=r).labels(MODEL).set(value)
        Counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", labels,
                registry=r).labels(MODEL).inc(14)
        Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", labels,
                registry=r).labels(MODEL).inc(412_860)
        Counter("vllm:generation_tokens_total", "Number of generation tokens processed.", labels,
                registry=r).labels(MODEL).inc(203_114)
        observe(Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                          labels, buckets=V0_TTFT, registry=r), (MODEL,), spread(0.08, 0.9, 800))
        observe(Histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                          labels, buckets=V0_TPOT, registry=r), (MODEL,), spread(0.03, 0.09, 2000))
        observe(Histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                          labels, buckets=V0_E2E, registry=r), (MODEL,), spread(4.0, 28.0, 800))
        return generate_latest(r)
    finally:
        enable_created_metrics()


def v1(version: str) -> bytes:
    """V1 engine (vllm/v1/metrics/loggers.py). 0.8: model_name only, gpu_cache_usage_perc, gpu_prefix_cache_*
    (blocks), time_per_output_token; decode-bound. 0.11: engine label (two data-parallel engines),
    kv_cache_usage_perc, prefix_cache_* (tokens), inter_token_latency, request_queue_time; queueing."""
    r = CollectorRegistry()
    new = version == "0.11"
    labels = ["model_name", "engine"] if new else ["model_name"]
    engines = [(MODEL, "0"), (MODEL, "1")] if new else [(MODEL,)]
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels,
                    registry=r)
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r)
    kv = Gauge("vllm:kv_cache_usage_perc" if new else "vllm:gpu_cache_usage_perc",
               "KV-cache usage. 1 means 100 percent usage." if new else "GPU KV-cache usage. 1 means 100 percent "
               "usage.", labels, registry=r)
    preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
                          registry=r)
    prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
    generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r)
    prefix = "vllm:prefix_cache" if new else "vllm:gpu_prefix_cache"
    unit = "tokens" if new else "blocks"
    queries = Counter(f"{prefix}_queries", f"Prefix cache queries, in terms of number of queried {unit}.", labels,
                      registry=r)
    hits = Counter(f"{prefix}_hits", f"Prefix cache hits, in terms of number of cached {unit}.", labels, registry=r)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                     buckets=V1_TTFT, registry=r)
    itl = Histogram("vllm:inter_token_latency_seconds" if new else "vllm:time_per_output_token_seconds",
                    "Histogram of inter-token latency in seconds." if new else
                    "Histogram of time per output token in seconds.", labels, buckets=V1_ITL, registry=r)
    e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels,
                    buckets=V1_E2E, registry=r)
    queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                      labels, buckets=V1_E2E, registry=r)
    for i, engine in enumerate(engines):
        if new:  # queueing: 40 and 25 waiting, queue time most of TTFT
            running.labels(*engine).set(256)
            waiting.labels(*engine).set(40 if i == 0 else 25)
            kv.labels(*engine).set(0.71 if i == 0 else 0.64)
            observe(ttft, engine, spread(8.0, 19.0, 300))
            observe(queue, engine, spread(6.5, 17.0, 300))
            observe(itl, engine, spread(0.02, 0.045, 3000))
            observe(e2e, engine, spread(12.0, 40.0, 300))
            queries.labels(*engine).inc(1_200_000)
            hits.labels(*engine).inc(300_000)
        else:  # decode-bound: fast first tokens, 160-280 ms between tokens with 384 running
            running.labels(*engine).set(384)
            waiting.labels(*engine).set(0)
            kv.labels(*engine).set(0.82)
            observe(ttft, engine, spread(0.2, 0.9, 500))
            observe(queue, engine, spread(0.0, 0.05, 500))
            observe(itl, engine, spread(0.16, 0.28, 5000))
            observe(e2e, engine, spread(20.0, 70.0, 500))
            queries.labels(*engine).inc(50_000)
            hits.labels(*engine).inc(15_000)
        preemptions.labels(*engine)
        prompt.labels(*engine).inc(1_000_000)
        generation.labels(*engine).inc(600_000)
    return generate_latest(r)


def main() -> None:
    (HERE / "vllm_v0_6.txt").write_bytes(v0_6())
    (HERE / "vllm_v1_0_8.txt").write_bytes(v1("0.8"))
    (HERE / "vllm_v1_0_11_dp2.txt").write_bytes(v1("0.11"))


if __name__ == "__main__":
    main()
