"""inference_metrics against a real HTTP /metrics endpoint (tests/tools/serving/metrics_server.py: prometheus_client
metrics under vLLM's names, fed known samples, served by http.server) and on recorded expositions of each version's
naming (tests/data/inference, PROVENANCE.md there). Quantiles are checked against the samples: the value the
bucket interpolation must give, and the bucket that holds the samples' own quantile.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, REPO, base_env, run_cli, stdio_client
from tools.core.context import ToolContext
from tools.core.errors import BadInput, LimitExceeded, UnreadableInput
from tools.serving.metrics import InferenceMetricsInput, InferenceMetricsResult, inference_metrics

pytestmark = pytest.mark.anyio

SERVER = REPO / "tests" / "tools" / "serving" / "metrics_server.py"
INFERENCE = DATA / "inference"
HOSTNAME = socket.gethostname()


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """The server, listening on loopback and on this host's own name's address; {host: port}."""
    ports = tmp_path_factory.mktemp("metrics") / "ports"
    own_address = socket.gethostbyname(HOSTNAME)
    process = subprocess.Popen([sys.executable, str(SERVER), str(ports), "127.0.0.1", own_address],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not ports.exists():
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "the metrics server did not start"
            time.sleep(0.05)
        yield {host: int(port) for host, port in (line.split() for line in ports.read_text().splitlines())}
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def url(endpoint: dict[str, int], path: str, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{endpoint['127.0.0.1']}/{path}"


def run(source: str, *, timeout_s: float = 60, root: Path = REPO, **args: Any) -> InferenceMetricsResult:
    params = InferenceMetricsInput.model_validate({"source": source, **args})
    return anyio.run(inference_metrics, params, ToolContext(roots=(root,), timeout_s=timeout_s))


def hits(endpoint: dict[str, int]) -> dict[str, int]:
    with urllib.request.urlopen(url(endpoint, "hits"), timeout=10) as response:
        return dict(json.load(response))


def sample_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def spread(low: float, high: float, n: int) -> list[float]:
    return [low + (high - low) * i / (n - 1) for i in range(n)]


def test_quantiles_match_the_served_samples(endpoint: dict[str, int]) -> None:
    result = run(url(endpoint, "prefill/metrics"))
    ttft = result.latency.ttft_s
    assert ttft is not None and ttft.count == 100 and ttft.window == "since_start" and ttft.lower_bound is False
    # 10 samples at 0.3 s (bucket 0.25-0.5), 90 spread over 2.6-4.9 s (bucket 2.5-5.0): interpolation in 2.5-5.0.
    assert ttft.p50 == pytest.approx(2.5 + 2.5 * (50 - 10) / 90)
    assert ttft.p90 == pytest.approx(2.5 + 2.5 * (90 - 10) / 90)
    assert ttft.p99 == pytest.approx(2.5 + 2.5 * (99 - 10) / 90)
    samples = [0.3] * 10 + spread(2.6, 4.9, 90)
    for q, got in ((0.5, ttft.p50), (0.9, ttft.p90), (0.99, ttft.p99)):
        assert 2.5 < sample_quantile(samples, q) <= 5.0 and 2.5 < got <= 5.0  # the same bucket
    assert ttft.mean == pytest.approx(sum(samples) / 100)
    itl = result.latency.itl_s
    assert itl is not None and itl.metric == "vllm:inter_token_latency_seconds" and itl.count == 200
    assert itl.p50 == pytest.approx(0.01 + 0.015 * 100 / 200)  # all 200 in the 0.01-0.025 bucket
    assert result.engine == "vllm" and result.scrapes == 1
    assert (result.running, result.waiting, result.kv_cache_usage_pct) == (4, 0, 35.0)
    assert result.prefix_cache_hit_pct == pytest.approx(3.0)  # 120 hits of 4000 queried tokens
    assert result.verdict == "prefill_bound" and result.severity == "warn"
    finding = result.findings[0]
    assert finding.evidence.startswith("TTFT p90 4.72 s (since start, n=100) over the 2 s target; 0 waiting")
    assert "prefix-cache hit rate is 3.0 %" in finding.fix and "--max-num-batched-tokens" in finding.fix


def test_a_quantile_past_the_last_bucket_is_a_lower_bound(endpoint: dict[str, int]) -> None:
    # V0 naming; TTFT buckets end at 10 s and 80 of 100 requests took 30 s.
    result = run(url(endpoint, "v0/metrics"))
    ttft = result.latency.ttft_s
    assert ttft is not None and ttft.lower_bound is True and ttft.lower_bound_quantiles == ["p50", "p90", "p99"]
    assert (ttft.p50, ttft.p90, ttft.p99) == (10.0, 10.0, 10.0)
    assert ttft.mean == pytest.approx((20 * 0.8 + 80 * 30.0) / 100)
    assert result.latency.itl_s is not None and result.latency.itl_s.metric == "vllm:time_per_output_token_seconds"
    assert result.kv_cache_usage_pct == 25.0
    assert result.verdict == "prefill_bound" and result.severity == "crit"  # at least 10 s, >= 3x the 2 s target
    assert "TTFT p90 >= 10.00 s" in result.findings[0].evidence
    p20 = run(url(endpoint, "v0/metrics")).latency.ttft_s
    assert p20 is not None and p20.p50 == 10.0


def test_two_scrapes_give_the_last_interval_and_rates(endpoint: dict[str, int]) -> None:
    # The first scrape sees 100 requests at 50 ms; the second adds 100 spread over 3.0-4.9 s and 5000 tokens.
    result = run(url(endpoint, "grow-a/metrics"), interval_s=1)
    assert result.scrapes == 2 and 1.0 <= (result.interval_s or 0) < 3.0
    ttft = result.latency.ttft_s
    assert ttft is not None and ttft.window == "interval" and ttft.count == 100
    assert ttft.p50 == pytest.approx(2.5 + 2.5 * 50 / 100)  # only the interval's 100, all in 2.5-5.0
    assert result.throughput.generation_tokens_per_s == pytest.approx(5000 / (result.interval_s or 1))
    assert result.throughput.requests_per_s == pytest.approx(100 / (result.interval_s or 1))
    assert (result.waiting, result.waiting_before) == (5, 0)
    assert result.verdict == "queueing" and result.severity == "crit"
    assert "5 requests waiting (was 0: growing)" in result.findings[0].evidence
    # One scrape of the same kind of server: since start, the median is still the fast requests' bucket.
    single = run(url(endpoint, "grow-b/metrics"))
    assert single.latency.ttft_s is not None and 0.04 < (single.latency.ttft_s.p50 or 0) <= 0.06


@pytest.mark.parametrize(("scenario", "verdict", "severity", "evidence"), [
    ("prefill", "prefill_bound", "warn", "TTFT p90 4.72 s"),
    ("queueing", "queueing", "crit", "12 requests waiting; 128 running; queue time 87 % of mean TTFT"),
    ("decode", "decode_bound", "warn", "inter-token p90 285.6 ms (since start, n=400) over the 100 ms target"),
    ("kv", "kv_cache_pressure", "crit", "KV-cache usage 99.0 % (>= 90 %); 7 preemptions since start"),
    ("healthy", "none", "ok", None),
])
def test_each_verdict(endpoint: dict[str, int], scenario: str, verdict: str, severity: str,
                      evidence: str | None) -> None:
    result = run(url(endpoint, f"{scenario}/metrics"))
    assert (result.verdict, result.severity) == (verdict, severity)
    if evidence is None:
        assert result.findings == [] and "meets the latency targets" in result.conclusion[0]
    else:
        assert [f.kind for f in result.findings] == [verdict]
        assert result.findings[0].evidence.startswith(evidence), result.findings[0].evidence
    if scenario == "queueing":  # two data-parallel engines: summed, and one row each
        assert [(e.engine, e.waiting, e.kv_cache_usage_pct) for e in result.engines] == [("0", 10, 60.0),
                                                                                         ("1", 2, 50.0)]
        assert result.kv_cache_usage_pct == 60.0


def test_hosts_redirects_size_and_time_are_bounded(endpoint: dict[str, int]) -> None:
    port = endpoint["127.0.0.1"]
    named = f"http://{HOSTNAME}:{port}/healthy/metrics"
    with pytest.raises(BadInput, match=f"host '{HOSTNAME.lower()}' is not loopback and not in allow_host"):
        run(named)
    assert run(named, allow_host=[HOSTNAME]).verdict == "none"
    for refused, message in (("http://192.0.2.7:8000/metrics", "not loopback"), ("file:///etc/passwd", "scheme"),
                             ("http://user:pw@127.0.0.1:1/metrics", "credentials")):
        with pytest.raises(BadInput, match=message):
            run(refused)
    before = hits(endpoint)
    redirected = r"answered 302 redirecting to 'http://127.0.0.1:\d+/healthy/metrics'; redirects are not followed"
    with pytest.raises(BadInput, match=redirected):
        run(url(endpoint, "redirect"))
    after = hits(endpoint)
    assert after["/redirect"] == before.get("/redirect", 0) + 1
    assert after["/healthy/metrics"] == before["/healthy/metrics"]  # the redirect's target was never requested
    with pytest.raises(LimitExceeded, match="sent more than 16777216 bytes"):
        run(url(endpoint, "big"))
    with pytest.raises(LimitExceeded, match="declares 1073741824 bytes"):
        run(url(endpoint, "big-declared"))
    started = time.monotonic()
    with pytest.raises(LimitExceeded, match="did not finish sending within"):
        run(url(endpoint, "slow"), timeout_s=2)
    assert time.monotonic() - started < 5


def test_bad_inputs_are_clear(tmp_path: Path) -> None:
    (tmp_path / "garbage.txt").write_text("vllm:num_requests_running 1\nthis is { not a metric\n")
    with pytest.raises(UnreadableInput, match="unparseable line 2: 'this is { not a metric'"):
        run("garbage.txt", root=tmp_path)
    (tmp_path / "node.txt").write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    with pytest.raises(UnreadableInput, match="holds no vLLM or SGLang serving metric"):
        run("node.txt", root=tmp_path)
    with pytest.raises(BadInput, match="interval_s with a file needs a second file"):
        run("node.txt", root=tmp_path, interval_s=5)
    with pytest.raises(BadInput, match="outside the allowed roots"):
        run("/etc/passwd", root=tmp_path)


@pytest.mark.parametrize(("name", "engine", "verdict", "names"), [
    ("sglang_docs_llama31_8b.txt", "sglang", "queueing",
     {"itl": "sglang:time_per_output_token_seconds", "kv_usage": "sglang:token_usage",
      "waiting": "sglang:num_queue_reqs"}),
    ("vllm_v0_6.txt", "vllm", "kv_cache_pressure",
     {"itl": "vllm:time_per_output_token_seconds", "kv_usage": "vllm:gpu_cache_usage_perc",
      "prefix_hit_rate": "vllm:gpu_prefix_cache_hit_rate"}),
    ("vllm_v1_0_8.txt", "vllm", "decode_bound",
     {"itl": "vllm:time_per_output_token_seconds", "kv_usage": "vllm:gpu_cache_usage_perc",
      "prefix_hits": "vllm:gpu_prefix_cache_hits_total"}),
    ("vllm_v1_0_11_dp2.txt", "vllm", "queueing",
     {"itl": "vllm:inter_token_latency_seconds", "kv_usage": "vllm:kv_cache_usage_perc",
      "prefix_hits": "vllm:prefix_cache_hits_total", "queue": "vllm:request_queue_time_seconds"}),
])
def test_recorded_expositions_of_each_version(name: str, engine: str, verdict: str, names: dict[str, str]) -> None:
    from tools.serving.prometheus import parse_exposition

    exposition = parse_exposition((INFERENCE / name).read_text())
    assert exposition.engine == engine
    assert {k: exposition.names[k] for k in names} == names
    result = run(str(INFERENCE / name))
    assert result.verdict == verdict and result.engine == engine


def test_recorded_values() -> None:
    sglang = run(str(INFERENCE / "sglang_docs_llama31_8b.txt"))
    ttft, itl = sglang.latency.ttft_s, sglang.latency.itl_s
    # 2513 of 11008 requests within 30 s: every quantile from p50 up is past the last bucket.
    assert ttft is not None and ttft.lower_bound_quantiles == ["p50", "p90", "p99"] and ttft.p50 == 30.0
    assert itl is not None and itl.p50 == pytest.approx(0.075 + 0.025 * (0.5 * 7400757 - 433413) / (4950195 - 433413))
    assert (sglang.running, sglang.waiting, sglang.kv_cache_usage_pct) == (162, 2826, 28.0)
    assert sglang.prefix_cache_hit_pct == pytest.approx(0.7507552643049313)
    v0 = run(str(INFERENCE / "vllm_v0_6.txt"))
    assert (v0.preemptions, v0.kv_cache_usage_pct, v0.prefix_cache_hit_pct) == (14, 96.3, 42.0)
    v08 = run(str(INFERENCE / "vllm_v1_0_8.txt"))
    assert v08.prefix_cache_hit_pct == pytest.approx(30.0)
    dp2 = run(str(INFERENCE / "vllm_v1_0_11_dp2.txt"))
    assert (dp2.waiting, dp2.running, dp2.kv_cache_usage_pct) == (65, 512, 71.0)
    assert [e.engine for e in dp2.engines] == ["0", "1"] and dp2.prefix_cache_hit_pct == pytest.approx(25.0)
    # A file and a later file of the same server: the interval is empty of new requests, so since-start is shown.
    same = run(str(INFERENCE / "vllm_v0_6.txt"), later=str(INFERENCE / "vllm_v0_6.txt"), interval_s=30)
    assert same.scrapes == 2 and same.preemptions == 0 and same.throughput.generation_tokens_per_s == 0
    assert same.latency.ttft_s is not None and same.latency.ttft_s.window == "since_start"


async def test_through_the_mcp_client_and_the_cli(endpoint: dict[str, int]) -> None:
    async with stdio_client(base_env()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        called = await client.call_tool("inference_metrics", {"source": url(endpoint, "kv/metrics")})
        refused = await client.call_tool("inference_metrics", {"source": "http://192.0.2.7/metrics"})
    hints = tools["inference_metrics"].annotations
    assert hints is not None and (hints.read_only_hint, hints.open_world_hint) == (True, True)
    assert called.is_error is False and called.structured_content is not None
    data = called.structured_content
    assert (data["verdict"], data["preemptions"], data["kv_cache_usage_pct"]) == ("kv_cache_pressure", 7, 99.0)
    assert called.content[0].text.startswith("## Inference server metrics (vLLM / SGLang): crit")
    assert refused.is_error and "is not loopback and not in allow_host" in refused.content[0].text
    done = await anyio.to_thread.run_sync(lambda: run_cli(
        ["inference-metrics", f"http://{HOSTNAME}:{endpoint['127.0.0.1']}/decode/metrics", "--allow-host", HOSTNAME,
         "--json"], base_env()))
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["verdict"] == "decode_bound"


def test_the_report_includes_the_server_metrics(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mcp_server.cli", "report", "--no-health", "--metrics",
                           str(INFERENCE / "vllm_v0_6.txt"), "--root", str(REPO), "--json"], cwd=tmp_path,
                          env=base_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    assert [(r["source"], r["symptom"]) for r in data["rows"]] == [
        ("inference_metrics", "kv_cache_pressure: inference server")]
    assert data["rows"][0]["evidence"] == "KV-cache usage 96.3 % (>= 90 %); 14 preemptions since start"
    assert "gpu-triage report: metrics ..." in done.stderr


def _page(tmp_path: Path, name: str, requests: int) -> Path:
    """A page as vLLM 0.11 serves it (prometheus_client's own exposition of its metric names), with `requests`
    finished requests well within the targets and nobody waiting."""
    from prometheus_client import generate_latest

    from tests.tools.serving.metrics_server import V1, spread

    server = V1()
    server.observe(server.ttft, spread(0.1, 0.4, requests) if requests else [])
    server.observe(server.itl, spread(0.02, 0.04, 25 * requests) if requests else [])
    server.state(running=2, waiting=0, kv=0.2)
    path = tmp_path / name
    path.write_bytes(generate_latest(server.registry))
    return path


def test_a_page_with_enough_requests_within_targets_is_ok_and_read(tmp_path: Path) -> None:
    page = _page(tmp_path, "healthy.txt", 40)
    result = run(str(page), root=tmp_path)
    assert (result.severity, result.verdict, result.decides) == ("ok", "none", None)
    [entry] = result.coverage
    assert (entry.input, entry.status.value) == (str(page), "read")
    assert entry.detail.startswith("vLLM exposition, ") and "histogram(s)" in entry.detail


def test_too_few_requests_or_an_empty_interval_cannot_judge_latency(tmp_path: Path) -> None:
    few = run(str(_page(tmp_path, "few.txt", 3)), root=tmp_path)
    assert (few.severity, few.verdict, few.findings) == ("unknown", "none", [])
    assert few.conclusion[0] == ("vLLM: no queueing or KV-cache pressure now, but only 3 request(s) finished since "
                                 "the server started (a p90 needs >= 10), so latency cannot be judged.")
    assert few.decides is not None and "interval_s=30" in few.decides
    assert few.coverage[0].status.value == "read"
    # The same page saved twice 30 s apart: nothing finished in between (a stalled server looks the same).
    page = _page(tmp_path, "healthy.txt", 40)
    stalled = run(str(page), later=str(page), interval_s=30, root=tmp_path)
    assert stalled.severity == "unknown" and stalled.scrapes == 2
    assert "no request finished in the 30 s between the scrapes" in stalled.conclusion[0]
    assert [c.status.value for c in stalled.coverage] == ["read", "read"]


def test_a_page_with_gauges_only_is_read_in_part_and_unknown(tmp_path: Path) -> None:
    (tmp_path / "gauges.txt").write_text(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n')
    done = run_cli(["inference-metrics", "gauges.txt", "--json", "--root", str(tmp_path)], base_env())
    assert done.returncode == 4, done.stderr
    data = json.loads(done.stdout)
    assert data["severity"] == "unknown"
    assert data["coverage"][0]["status"] == "partial"
    assert data["coverage"][0]["detail"].endswith("no TTFT or ITL histogram")
    assert "the page has no latency histogram" in data["conclusion"][0]
    (tmp_path / "node.txt").write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    refused = run_cli(["inference-metrics", "node.txt", "--root", str(tmp_path)], base_env())
    assert refused.returncode == 3 and "holds no vLLM or SGLang serving metric" in refused.stderr
