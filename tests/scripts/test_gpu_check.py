"""scripts/gpu_check.py, the GPU machine's check, kept runnable: its --cpu toy run records every scenario on the CPU
and reads the traces back (the real run needs CUDA and never runs in CI)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.helpers import REPO, base_env


def test_cpu_run_records_each_scenario_stripped_and_summarised(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--cpu", str(tmp_path)],
                          env=base_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = json.loads((tmp_path / "summaries.json").read_text())
    assert set(summaries) == {"loader_num_workers_0", "tiny_kernels", "busy_gemm", "item_per_step",
                              "cuda_graph_replay", "host_preprocessing"}
    # On the CPU the traces hold no GPU events: GPU idleness cannot be judged (unknown, decided by a trace with CUDA
    # activities); the host figures (the DataLoader's share of the step) are still given.
    loader = summaries["loader_num_workers_0"]
    assert loader["ours"] == "unknown" and loader["result"]["severity"] == "unknown"
    assert "ProfilerActivity.CUDA" in loader["result"]["decides"]
    rank = loader["result"]["ranks"][0]
    assert rank["data_wait_pct"] is not None and rank["gpu_events"] == 0
    with tarfile.open(tmp_path / "traces.tar.gz") as archive:
        names = archive.getnames()
        assert sorted(names) == sorted(f"{s}.json.gz" for s in summaries)
        for name in names:
            member = archive.extractfile(name)
            assert member is not None
            trace = json.loads(gzip.decompress(member.read()))
            # No metadata block travels: only what a trace needs.
            assert set(trace) <= {"traceEvents", "schemaVersion", "deviceProperties", "displayTimeUnit",
                                  "distributedInfo"}
            assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])
