"""compare_runs: the real ResNet50 pair (num_workers=0 vs 4) through the MCP client and in `gpu-triage report
--baseline`, with the expected numbers computed here from the traces' ProfilerStep events; generated Kineto traces
with known per-step causes for every status, a regression and a noise-only pair; step-time logs (a straggler that
goes away, tokens/s, a shift hidden in noise, a shift too small to matter); the U test against a brute-force
enumeration; two /metrics pages (a fix, and noise); and the refusals."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from tests.helpers import REPO, base_env, run_cli, stdio_client
from tools.compare.runs import CompareRunsInput, CompareRunsResult, compare_runs, mann_whitney_p
from tools.core.context import ToolContext

pytestmark = pytest.mark.anyio

SHARED = REPO.parent / "shared" / "data" / "traces"
SLOW, FAST = "kineto/resnet50_num_workers_0", "kineto/resnet50_num_workers_4"


def compare(before: str, after: str, root: Path, **args: Any) -> CompareRunsResult:
    return anyio.run(compare_runs, CompareRunsInput(before=before, after=after, **args),
                     ToolContext(roots=(root.resolve(),)))


def steady_steps_ms(folder: str) -> list[float]:
    """ProfilerStep durations read with plain json: the last step left out (as HTA), then the first as warm-up."""
    (file,) = (SHARED / folder).glob("*.json.gz")
    events = json.loads(gzip.decompress(file.read_bytes()))["traceEvents"]
    steps = sorted((e["ts"], e["dur"]) for e in events if e.get("ph") == "X"
                   and str(e.get("name", "")).startswith("ProfilerStep#"))
    return [dur / 1000 for _, dur in steps[:-1]][1:]


# ---- the real pair ---------------------------------------------------------------------------------------------


async def test_real_resnet50_pair_over_mcp() -> None:
    slow, fast = steady_steps_ms(SLOW), steady_steps_ms(FAST)
    async with stdio_client(base_env(), "--root", str(SHARED)) as client:
        result = await client.call_tool("compare_runs", {"before": SLOW, "after": FAST})
        same = await client.call_tool("compare_runs", {"before": SLOW, "after": SLOW})
    assert result.is_error is False, result.content[0].text
    assert len(result.content[0].text.encode()) <= 8192
    out = result.structured_content
    assert len(slow) == len(fast) == 4 and [r["steps"] for r in out["runs"]] == [4, 4]
    assert out["step_time_ms"]["before"] == pytest.approx(statistics.median(slow), abs=1e-3)  # 176.693
    assert out["step_time_ms"]["after"] == pytest.approx(statistics.median(fast), abs=1e-3)  # 126.548
    assert out["speedup"] == pytest.approx(statistics.median(slow) / statistics.median(fast), abs=1e-3)  # 1.396
    # Every num_workers=0 step is slower than every num_workers=4 step: U = 0, exact p = 2 / C(8, 4).
    assert max(fast) < min(slow) and out["p_value"] == pytest.approx(2 / 70, abs=1e-4)
    assert out["verdict"] == "improved"
    causes = {c["kind"]: c for c in out["causes"]}
    assert causes["data_loading"]["status"] == "resolved"
    assert causes["data_loading"]["before_pct"] == 34.66 and causes["data_loading"]["after_pct"] == 0.79
    # With 4 workers the GPU waits for the host's op-by-op dispatch (~100 us gaps, each kernel launched after the
    # GPU ran dry): launch-bound is what dominates now.
    assert out["now_dominant"]["kind"] == "launch_bound" and out["now_dominant"]["branch"] == "gpu_utilization_low"
    assert "data_loading resolved" in out["conclusion"][1] and "Now dominant: launch_bound" in out["conclusion"][2]
    assert out["next_steps"][0]["branch"] == "gpu_utilization_low"
    assert f"compare_runs(before='{FAST}'" in out["next_steps"][0]["action"]
    assert {m["metric"]: (m["before"], m["after"]) for m in out["breakdown"]}["GPU busy"] == (55.27, 70.95)
    # A run against itself: identical steps, p = 1, no factor.
    assert same.structured_content["verdict"] == "no_significant_change"
    assert same.structured_content["speedup"] is None and same.structured_content["p_value"] == 1.0


def test_real_pair_in_report_with_baseline(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mcp_server.cli", "report", "--no-health", "--baseline", SLOW,
                           "--traces", FAST, "--root", str(SHARED), "--json"], cwd=SHARED, env=base_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    out = json.loads(done.stdout)
    rows = {b["measure"]: b for b in out["baseline"]}
    expected = statistics.median(steady_steps_ms(SLOW)) / statistics.median(steady_steps_ms(FAST))
    assert rows["median step ms (steady state)"]["change"] == f"x{expected:.2f}" == "x1.40"
    assert rows["cause data_loading (% of step)"]["change"] == "resolved"
    assert rows["now dominant"]["after"] == "launch_bound"
    compared = next(r for r in out["rows"] if r["source"] == "compare_runs")
    assert compared["symptom"] == "improved: compared with the baseline"
    assert "baseline" in done.stderr
    text = subprocess.run([sys.executable, "-m", "mcp_server.cli", "report", "--no-health", "--baseline", SLOW,
                           "--traces", FAST, "--root", str(SHARED)], cwd=SHARED, env=base_env(),
                          capture_output=True, text=True, timeout=120).stdout
    assert "**Compared with the baseline**" in text
    assert "| cause data_loading (% of step) | 34.7 | 0.8 | resolved |" in text


def test_cli_takes_before_and_after_as_positionals(tmp_path: Path) -> None:
    # From the data's folder, as a shell user runs it: the relative paths mean that folder.
    done = run_cli(["compare-runs", SLOW, FAST, "--root", str(SHARED), "--json"], base_env(), cwd=SHARED)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "improved"


# ---- generated Kineto traces -----------------------------------------------------------------------------------


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, data_ms: float, sync_ms: float, host_ms: float, compute_ms: list[float],
                comm_ms: float) -> list[float]:
    """One rank, one step per compute time: GPU idle while the DataLoader runs, then while cudaStreamSynchronize
    waits, then while the host works before launching the step's first kernel (input preprocessing), then one
    compute kernel, then an all-reduce with no compute beside it (exposed). Returns the step lengths in ms."""
    events: list[dict[str, Any]] = []
    t, corr, lengths = 1_000_000.0, 1, []
    for i, compute in enumerate(compute_ms):
        start = t
        if data_ms:
            events.append(_x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t,
                             data_ms * 1000))
            t += data_ms * 1000
        if sync_ms:
            events.append(_x("cuda_runtime", "cudaStreamSynchronize", t, sync_ms * 1000))
            t += sync_ms * 1000
        t += host_ms * 1000
        for name, ms, stream in (("volta_sgemm_128x64_nn", compute, 7),
                                 ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", comm_ms, 20)):
            if ms:
                events.append(_x("cuda_runtime", "cudaLaunchKernel", t - 8, 4, correlation=corr))
                events.append({**_x("kernel", name, t, ms * 1000, stream=stream, correlation=corr), "pid": 0,
                               "tid": stream})
                corr += 1
                t += ms * 1000
        events.append(_x("user_annotation", f"ProfilerStep#{i}", start, t - start))
        lengths.append((t - start) / 1000)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))
    return lengths


def jitter(seed: int, count: int, mean: float, sigma: float) -> list[float]:
    rng = random.Random(seed)
    return [round(mean + rng.gauss(0, sigma), 3) for _ in range(count)]


def test_generated_pair_labels_each_cause(tmp_path: Path) -> None:
    # Before: data 30 ms, host preprocessing 20 ms, exposed all-reduce 10 ms; after: the data wait gone, a sync of
    # 15 ms new, preprocessing down to 8 ms, the all-reduce the same.
    before = write_trace(tmp_path / "before" / "rank0.json.gz", 30, 0, 20, jitter(1, 11, 50, 0.5), 10)
    after = write_trace(tmp_path / "after" / "rank0.json.gz", 0, 15, 8, jitter(2, 11, 50, 0.5), 10)
    result = compare("before", "after", tmp_path)
    status = {c.kind: (c.status, c.before_ms, c.after_ms) for c in result.causes}
    assert status == {"data_loading": ("resolved", 30.0, 0.0), "implicit_sync": ("new", 0.0, 15.0),
                      "input_preprocessing": ("reduced", 20.0, 8.0), "exposed_comm": ("unchanged", 10.0, 10.0)}
    # Steady state: the last step left out, then 1 of the 10 as warm-up.
    assert [r.steps for r in result.runs] == [9, 9] and [r.warmup_dropped for r in result.runs] == [1, 1]
    assert result.step_time_ms.before == pytest.approx(statistics.median(before[1:-1]), abs=1e-3)
    assert result.step_time_ms.after == pytest.approx(statistics.median(after[1:-1]), abs=1e-3)
    assert result.verdict == "improved"
    assert result.speedup == pytest.approx(statistics.median(before[1:-1]) / statistics.median(after[1:-1]),
                                           abs=1e-3)
    # What dominates now is the largest share after the fix: the new sync (15 ms) over the all-reduce (10 ms).
    assert result.now_dominant is not None and result.now_dominant.kind == "implicit_sync"
    assert result.next_steps[0].branch == "gpu_utilization_low" and result.next_steps[0].step == "trace"
    exposed = {m.metric: (m.before, m.after) for m in result.breakdown}["exposed communication"]
    assert exposed[0] is not None and exposed[1] is not None and exposed[1] > exposed[0]  # same ms, shorter step
    kernels = {k.name: k for k in result.kernels}
    assert set(kernels) <= {"volta_sgemm_128x64_nn", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}


def test_generated_regression(tmp_path: Path) -> None:
    write_trace(tmp_path / "good.json.gz", 0, 0, 2, jitter(3, 11, 60, 0.5), 5)
    write_trace(tmp_path / "bad.json.gz", 25, 0, 2, jitter(4, 11, 60, 0.5), 5)
    result = compare("good.json.gz", "bad.json.gz", tmp_path)
    assert result.verdict == "regressed" and result.severity == "warn"
    assert result.speedup == pytest.approx(67 / 92, abs=0.01)
    assert {c.kind: c.status for c in result.causes}["data_loading"] == "new"
    assert result.next_steps[0].action == "summarize_trace(path='bad.json.gz')"


def test_noise_only_pair_is_not_an_improvement(tmp_path: Path) -> None:
    # The same job twice: only the kernel time jitters (sigma 4 ms on ~100 ms steps), the second run by chance a
    # little faster in the median.
    first = write_trace(tmp_path / "run1.json.gz", 5, 0, 5, jitter(10, 31, 85, 4), 5)
    second = write_trace(tmp_path / "run2.json.gz", 5, 0, 5, jitter(11, 31, 85, 4), 5)
    result = compare("run1.json.gz", "run2.json.gz", tmp_path)
    assert statistics.median(first[3:-1]) != statistics.median(second[3:-1])
    assert result.verdict == "no_significant_change" and result.speedup is None
    assert result.p_value is not None and result.p_value >= 0.05
    assert result.conclusion[0].startswith("No significant change")
    assert {c.status for c in result.causes} == {"unchanged"}


# ---- step-time logs --------------------------------------------------------------------------------------------


def write_logs(folder: Path, ranks: int, steps: list[float], compute: dict[int, float], default_compute: float,
               seed: int) -> None:
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for rank in range(ranks):
        lines = [f"rank {rank} step {i} time {t + rng.uniform(-0.5, 0.5):.2f} ms "
                 f"(compute {compute.get(rank, default_compute) + rng.uniform(-0.3, 0.3):.2f} ms)"
                 for i, t in enumerate(steps)]
        (folder / f"rank{rank}.log").write_text("\n".join(lines) + "\n")


def test_logs_straggler_gone(tmp_path: Path) -> None:
    write_logs(tmp_path / "before", 4, [200.0] * 5 + [120.0] * 60, {2: 110.0}, 80.0, seed=1)
    write_logs(tmp_path / "after", 4, [200.0] * 5 + [90.0] * 60, {}, 80.0, seed=2)
    result = compare("before/rank*.log", "after", tmp_path)  # a glob, and a folder
    assert result.kind == "logs" and result.verdict == "improved"
    assert [(r.ranks, r.steps, r.warmup_dropped) for r in result.runs] == [(4, 59, 6), (4, 59, 6)]
    assert result.speedup == pytest.approx(120 / 90, abs=0.01)
    assert [r.throughput_unit for r in result.runs] == ["steps/s", "steps/s"]
    assert result.runs[1].throughput == pytest.approx(1000 / 90, abs=0.1)
    before, after = result.rank_spread
    assert (before.straggler, before.flagged, after.straggler, after.flagged) == ("straggler", [2], "none", [])
    # Synchronous ranks log the same step time; the spread that shows the straggler is that of compute time.
    assert (before.basis, before.slowest_rank, after.basis) == ("compute", 2, "compute")
    assert before.spread_pct == pytest.approx(100 * 30 / 80, abs=1.5) and after.spread_pct is not None
    assert after.spread_pct < 1.5
    assert "The straggler is gone: rank(s) 2 no longer flagged (per-rank compute spread 37" in result.conclusion[1]
    assert result.now_dominant is None and result.next_steps[0].step == "trace"


def test_logs_tokens_per_second(tmp_path: Path) -> None:
    for name, tps in (("a.log", 6000), ("b.log", 7500)):
        rng = random.Random(tps)
        (tmp_path / name).write_text("".join(
            f"step: {i}  loss:  9.8000  memory: 10.00GiB(10.00%)  tps: {tps + rng.randint(-40, 40):,}  "
            "tflops: 100.00  mfu: 10.00%\n" for i in range(1, 41)))
    result = compare("a.log", "b.log", tmp_path)
    assert [r.throughput_unit for r in result.runs] == ["tokens/s", "tokens/s"]
    assert result.verdict == "improved" and result.speedup == pytest.approx(1.25, abs=0.01)
    assert result.runs[0].throughput == pytest.approx(6000, abs=30)


def test_logs_shift_within_noise_and_shift_too_small(tmp_path: Path) -> None:
    # 4.8% lower median, but the steps overlap almost entirely: the U test does not separate them.
    (tmp_path / "n1").mkdir()
    (tmp_path / "n2").mkdir()
    before = [100, 130, 90, 120, 85, 140, 95, 125, 105, 115]
    (tmp_path / "n1" / "rank0.log").write_text("".join(f"step {i} time {t} ms\n" for i, t in enumerate(before)))
    (tmp_path / "n2" / "rank0.log").write_text("".join(f"step {i} time {t - 5} ms\n" for i, t in enumerate(before)))
    noisy = compare("n1/rank0.log", "n2/rank0.log", tmp_path, warmup_steps=0)
    assert noisy.measured_ratio == pytest.approx(110 / 105, abs=1e-3)
    assert noisy.verdict == "no_significant_change" and noisy.speedup is None and noisy.p_value is not None
    assert noisy.p_value > 0.05
    # 1% faster with hardly any noise over 2000 steps: significant for the test, too small to call.
    (tmp_path / "s1.log").write_text("".join(f"step {i} time {100 + (i % 7) * 0.01:.2f} ms\n" for i in range(2000)))
    (tmp_path / "s2.log").write_text("".join(f"step {i} time {99 + (i % 7) * 0.01:.2f} ms\n" for i in range(2000)))
    small = compare("s1.log", "s2.log", tmp_path)
    assert small.p_value is not None and small.p_value < 1e-6
    assert small.verdict == "no_significant_change" and "below 2%" in small.conclusion[0]


# ---- statistics and refusals -----------------------------------------------------------------------------------


def brute_force_p(a: list[float], b: list[float]) -> float:
    """Two-sided exact p by enumerating every split of the pooled values (no ties)."""
    pooled = a + b
    def u(first: tuple[float, ...]) -> float:
        rest = [v for v in pooled if v not in first]
        return sum(1 for x in first for y in rest if x > y)
    observed = u(tuple(a))
    centre = len(a) * len(b) / 2
    splits = list(itertools.combinations(pooled, len(a)))
    return sum(1 for s in splits if abs(u(s) - centre) >= abs(observed - centre)) / len(splits)


@pytest.mark.parametrize("seed", range(6))
def test_exact_u_test_matches_enumeration(seed: int) -> None:
    rng = random.Random(seed)
    a = [rng.random() + 0.3 * seed / 5 for _ in range(3 + seed % 4)]
    b = [rng.random() for _ in range(4 + seed % 3)]
    assert mann_whitney_p(np.array(a), np.array(b)) == pytest.approx(brute_force_p(a, b), rel=1e-12)


async def test_refusals_over_mcp(tmp_path: Path) -> None:
    write_trace(tmp_path / "t.json.gz", 0, 0, 2, [50, 50, 50, 50], 5)
    (tmp_path / "r.log").write_text("".join(f"step {i} time 100 ms\n" for i in range(20)))
    (tmp_path / "m1.txt").write_text("# HELP vllm:time_to_first_token_seconds TTFT\n"
                                     "# TYPE vllm:time_to_first_token_seconds histogram\n")
    (tmp_path / "m2.txt").write_text("vllm:num_requests_running{model_name=\"m\"} 3.0\n")
    (tmp_path / "empty.log").write_text("nothing here\n")
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        mixed = await client.call_tool("compare_runs", {"before": "t.json.gz", "after": "r.log"})
        metrics = await client.call_tool("compare_runs", {"before": "m1.txt", "after": "m2.txt"})
        no_steps = await client.call_tool("compare_runs", {"before": "empty.log", "after": "r.log"})
        outside = await client.call_tool("compare_runs", {"before": "/etc/passwd", "after": "r.log"})
        alive = await client.call_tool("compare_runs", {"before": "r.log", "after": "r.log"})
    # Read, but not comparable (a trace and logs) or one side with nothing to measure: unknown, never "no change".
    unlike = mixed.structured_content
    assert mixed.is_error is False and unlike is not None
    assert (unlike["severity"], unlike["verdict"]) == ("unknown", "not_comparable") and unlike["speedup"] is None
    assert unlike["conclusion"][0].startswith("Not comparable: before is traces and after is logs")
    assert [(c["input"], c["status"]) for c in unlike["coverage"]] == [("t.json.gz", "read"), ("r.log", "read")]
    assert unlike["decides"].startswith("Two profiler traces, two sets of step-time logs")
    assert metrics.is_error and "holds no vLLM or SGLang serving metric" in metrics.content[0].text
    empty = no_steps.structured_content
    assert no_steps.is_error is False and empty is not None
    assert (empty["severity"], empty["verdict"]) == ("unknown", "cannot_tell")
    assert [(c["input"], c["status"]) for c in empty["coverage"]] == [("empty.log", "not_understood"),
                                                                        ("r.log", "read")]
    assert "no step-time line recognised in the before logs (empty.log)" in empty["conclusion"][0]
    assert outside.is_error and "outside the allowed roots" in outside.content[0].text
    assert alive.is_error is False and alive.structured_content["verdict"] == "no_significant_change"


# ---- inference /metrics pages ---------------------------------------------------------------------------------

BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
LABEL = 'model_name="m"'


def histogram(name: str, per_bucket: dict[float, int], mean: float) -> str:
    """A Prometheus histogram with `per_bucket` observations in the bucket of each upper bound."""
    lines, running = [f"# TYPE {name} histogram"], 0
    for bound in (*BOUNDS, float("inf")):
        running += per_bucket.get(bound, 0)
        le = "+Inf" if bound == float("inf") else str(bound)
        lines.append(f'{name}_bucket{{le="{le}",{LABEL}}} {running}.0')
    lines += [f"{name}_count{{{LABEL}}} {running}.0", f"{name}_sum{{{LABEL}}} {running * mean}"]
    return "\n".join(lines) + "\n"


def page(e2e: dict[float, int], ttft: dict[float, int], waiting: int, kv: float, preempted: int) -> str:
    return (histogram("vllm:e2e_request_latency_seconds", e2e, 3.0)
            + histogram("vllm:time_to_first_token_seconds", ttft, 0.5)
            + histogram("vllm:inter_token_latency_seconds", {0.3: sum(e2e.values())}, 0.05)
            + f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{LABEL}}} 64.0\n"
            + f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{LABEL}}} {waiting}.0\n"
            + f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{LABEL}}} {kv}\n"
            + f"# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{{LABEL}}} {preempted}.0\n")


def test_two_metrics_pages(tmp_path: Path) -> None:
    # Before: KV cache full, requests preempted, e2e mostly 2.5-5 s; after: e2e mostly 1-1.5 s.
    (tmp_path / "before.txt").write_text(page({2.5: 100, 5.0: 800, 10.0: 100}, {1.0: 600, 2.0: 400}, 30, 0.99, 40))
    (tmp_path / "after.txt").write_text(page({1.0: 100, 1.5: 800, 2.0: 100}, {0.3: 900, 0.5: 100}, 0, 0.4, 0))
    # Noise: the same server twice, a few requests moved between neighbouring buckets.
    (tmp_path / "again.txt").write_text(page({2.5: 104, 5.0: 793, 10.0: 103}, {1.0: 590, 2.0: 410}, 30, 0.99, 40))
    fixed = compare("before.txt", "after.txt", tmp_path)
    noise = compare("before.txt", "again.txt", tmp_path)
    assert fixed.kind == "inference" and fixed.verdict == "improved"
    # p50 by histogram_quantile: 500th of 1000 in (2.5, 5] holding 100..900 -> 2.5 + 2.5 * 400/800 = 3.75 s;
    # after, in (1, 1.5] -> 1 + 0.5 * 400/800 = 1.25 s.
    p50 = {(q.metric, q.quantile): (q.before_s, q.after_s) for q in fixed.latency}
    assert p50[("e2e", "p50")] == (3.75, 1.25) and fixed.speedup == 3.0
    assert p50[("ttft", "p50")] == (pytest.approx(0.8 + 0.2 * 500 / 600, abs=1e-3), pytest.approx(0.3 * 500 / 900,
                                                                                                  abs=1e-3))
    assert [r.steps for r in fixed.runs] == [1000, 1000]
    assert fixed.inference_verdicts[0] == "kv_cache_pressure" and fixed.inference_verdicts[1] != "kv_cache_pressure"
    assert f"inference_metrics' verdict: kv_cache_pressure -> {fixed.inference_verdicts[1]}." == fixed.conclusion[1]
    assert noise.verdict == "no_significant_change" and noise.speedup is None
    assert noise.p_value is not None and noise.p_value > 0.05
    assert noise.inference_verdicts == ["kv_cache_pressure", "kv_cache_pressure"]
