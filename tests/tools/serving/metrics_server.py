"""A real HTTP /metrics endpoint for the inference_metrics tests: prometheus_client metrics under vLLM's names,
fed known latency samples, served by http.server with prometheus_client's own exposition (generate_latest).

    python tests/tools/serving/metrics_server.py PORT_FILE HOST [HOST ...]

Listens on an ephemeral port on each HOST (the same port number when it can), writes "HOST PORT" lines to
PORT_FILE, and serves until killed:

    /<scenario>/metrics   one registry per scenario (SCENARIOS below); `grow` observes a new batch per request
    /redirect             302 to /healthy/metrics (the tool must not follow it)
    /big                  an endless body without Content-Length (the tool must stop at its cap)
    /big-declared         Content-Length over the cap (refused before reading)
    /slow                 one byte every 0.5 s (the tool must give up at its deadline)
    /hits                 JSON: how many times each path was requested (to prove a redirect was not followed)
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vLLM V1 (0.11) bucket bounds; V0 (0.6) ones for the "v0" scenario.
V1_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
           80.0, 160.0, 640.0, 2560.0]
V1_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
V1_E2E = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
          960.0, 1920.0, 7680.0]
V0_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
V0_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
V0_E2E = [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def spread(low: float, high: float, n: int) -> list[float]:
    """n values evenly spread over [low, high]."""
    return [low + (high - low) * i / (n - 1) for i in range(n)] if n > 1 else [low]


class V1:
    """The V1 engine's metrics (names of vLLM 0.11: inter_token_latency, kv_cache_usage_perc, prefix_cache_*)."""

    def __init__(self, engines: tuple[str, ...] = ("0",)) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        r = self.registry
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=V1_TTFT, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             labels, buckets=V1_ITL, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             labels, buckets=V1_E2E, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", labels, buckets=V1_E2E,
                               registry=r)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             labels, registry=r, multiprocess_mode="mostrecent")
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
                             registry=r, multiprocess_mode="mostrecent")
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                        registry=r, multiprocess_mode="mostrecent")
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   labels, registry=r)
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels,
                                  registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                            labels, registry=r)
        self.queries = Counter("vllm:prefix_cache_queries",
                               "Prefix cache queries, in terms of number of queried tokens.", labels, registry=r)
        for engine in engines:  # every series exists from the start, as in vLLM
            for metric in (self.ttft, self.itl, self.e2e, self.queue, self.running, self.waiting, self.kv,
                           self.preemptions, self.generation, self.prompt, self.hits, self.queries):
                metric.labels(MODEL, engine)

    def observe(self, metric: Histogram, values: list[float], engine: str = "0") -> None:
        for value in values:
            metric.labels(MODEL, engine).observe(value)

    def state(self, running: float, waiting: float, kv: float, engine: str = "0") -> None:
        self.running.labels(MODEL, engine).set(running)
        self.waiting.labels(MODEL, engine).set(waiting)
        self.kv.labels(MODEL, engine).set(kv)


def prefill() -> V1:
    """TTFT high with nobody waiting and little queue time: 10 requests at 0.3 s, 90 spread over 2.6-4.9 s."""
    m = V1()
    m.observe(m.ttft, [0.3] * 10 + spread(2.6, 4.9, 90))
    m.observe(m.itl, spread(0.011, 0.024, 200))
    m.observe(m.e2e, spread(3.0, 9.0, 100))
    m.observe(m.queue, [0.01] * 100)
    m.state(running=4, waiting=0, kv=0.35)
    m.hits.labels(MODEL, "0").inc(120)
    m.queries.labels(MODEL, "0").inc(4000)
    return m


def queueing() -> V1:
    """Two data-parallel engines, 10 + 2 requests waiting; queue time is most of TTFT."""
    m = V1(engines=("0", "1"))
    for engine, waiting in (("0", 10), ("1", 2)):
        m.observe(m.ttft, spread(6.0, 9.0, 50), engine)
        m.observe(m.queue, spread(5.0, 8.0, 50), engine)
        m.observe(m.itl, spread(0.02, 0.04, 100), engine)
        m.state(running=64, waiting=waiting, kv=0.6 if engine == "0" else 0.5, engine=engine)
    return m


def decode() -> V1:
    """Fast first tokens, slow tokens after: inter-token latency spread over 0.16-0.29 s."""
    m = V1()
    m.observe(m.ttft, spread(0.05, 0.09, 40))
    m.observe(m.itl, spread(0.16, 0.29, 400))
    m.state(running=256, waiting=0, kv=0.7)
    return m


def kv_pressure() -> V1:
    """KV cache 99 % full with 7 preemptions; latencies within targets."""
    m = V1()
    m.observe(m.ttft, spread(0.1, 0.4, 40))
    m.observe(m.itl, spread(0.02, 0.04, 100))
    m.state(running=48, waiting=0, kv=0.99)
    m.preemptions.labels(MODEL, "0").inc(7)
    return m


def healthy() -> V1:
    m = V1()
    m.observe(m.ttft, spread(0.1, 0.4, 40))
    m.observe(m.itl, spread(0.02, 0.04, 100))
    m.state(running=8, waiting=0, kv=0.2)
    return m


def v0_beyond_buckets() -> CollectorRegistry:
    """vLLM V0 names (time_per_output_token, gpu_cache_usage_perc; no engine label): TTFT buckets end at 10 s and
    80 of 100 requests took 30 s, so p50 and p90 are only "at least 10 s"."""
    r = CollectorRegistry()
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     ["model_name"], buckets=V0_TTFT, registry=r)
    tpot = Histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                     ["model_name"], buckets=V0_TPOT, registry=r)
    Histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
              ["model_name"], buckets=V0_E2E, registry=r).labels(MODEL)
    for value in [0.8] * 20 + [30.0] * 80:
        ttft.labels(MODEL).observe(value)
    for value in spread(0.02, 0.04, 100):
        tpot.labels(MODEL).observe(value)
    Gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", ["model_name"],
          registry=r).labels(MODEL).set(3)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", ["model_name"],
          registry=r).labels(MODEL).set(0)
    Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", ["model_name"],
          registry=r).labels(MODEL).set(0.25)
    return r


class Growing:
    """Each request first observes the next batch: scrape 1 sees 100 fast requests, scrape 2 adds 100 slow ones
    (TTFT 3.0-4.9 s), 5000 generated tokens and 5 waiting requests."""

    def __init__(self) -> None:
        self.metrics = V1()
        self.batches = 0
        self.lock = threading.Lock()

    def next(self) -> CollectorRegistry:
        m = self.metrics
        with self.lock:
            self.batches += 1
            if self.batches == 1:
                m.observe(m.ttft, [0.05] * 100)
                m.observe(m.e2e, [0.4] * 100)
                m.generation.labels(MODEL, "0").inc(1000)
                m.state(running=2, waiting=0, kv=0.1)
            elif self.batches == 2:
                m.observe(m.ttft, spread(3.0, 4.9, 100))
                m.observe(m.e2e, [6.0] * 100)
                m.generation.labels(MODEL, "0").inc(5000)
                m.state(running=32, waiting=5, kv=0.5)
        return m.registry


def main() -> None:
    port_file, hosts = sys.argv[1], sys.argv[2:]
    fixed = {"prefill": prefill().registry, "queueing": queueing().registry, "decode": decode().registry,
             "kv": kv_pressure().registry, "healthy": healthy().registry, "v0": v0_beyond_buckets()}
    growing: dict[str, Growing] = {}
    hits: Tally[str] = Tally()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def send(self, code: int, body: bytes, content_type: str = "text/plain", **headers: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            with lock:
                hits[self.path] += 1
            parts = self.path.strip("/").split("/")
            routes: dict[str, Callable[[], None]] = {"redirect": self.redirect, "big": self.big,
                                                     "big-declared": self.big_declared, "slow": self.slow,
                                                     "hits": self.hits}
            if len(parts) == 1 and parts[0] in routes:
                routes[parts[0]]()
            elif len(parts) == 2 and parts[1] == "metrics" and parts[0] in fixed:
                self.send(200, generate_latest(fixed[parts[0]]), CONTENT_TYPE_LATEST)
            elif len(parts) == 2 and parts[1] == "metrics" and parts[0].startswith("grow"):
                with lock:
                    source = growing.setdefault(parts[0], Growing())
                self.send(200, generate_latest(source.next()), CONTENT_TYPE_LATEST)
            else:
                self.send(404, b"not found\n")

        def redirect(self) -> None:
            self.send(302, b"", Location="/healthy/metrics")

        def big(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.end_headers()
            line = b'vllm:num_requests_running{model_name="m",engine="0"} 1.0\n' * 16384
            try:
                for _ in range(64):  # ~60 MiB at most, closed-delimited
                    self.wfile.write(line)
            except OSError:
                pass  # the client stopped reading, as it should
            self.close_connection = True

        def big_declared(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            self.close_connection = True

        def slow(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.end_headers()
            try:
                for _ in range(120):
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass
            self.close_connection = True

        def hits(self) -> None:
            with lock:
                body = json.dumps(dict(hits)).encode()
            self.send(200, body, "application/json")

    servers = []
    port = 0
    for host in dict.fromkeys(hosts):
        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        port = server.server_address[1]
        servers.append((host, server))
        threading.Thread(target=server.serve_forever, daemon=True).start()
    with open(port_file + ".tmp", "w") as out:
        out.writelines(f"{host} {server.server_address[1]}\n" for host, server in servers)
    os.replace(port_file + ".tmp", port_file)
    threading.Event().wait()


if __name__ == "__main__":
    main()
