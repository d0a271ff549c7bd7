"""analyze_memory on allocator snapshots of every generation, memory_summary text, memory_stats dumps and real OOM
messages; hostile and broken inputs.

The snapshots are written by `Allocator` below: a small model of the caching allocator (blocks split from
segments, freed blocks merged, a trace entry per action) that dumps in the schema PyTorch writes, generation by
generation (read from the installed wheel: torch/cuda/memory.py `_snapshot`, torch/cuda/_memory_viz.py, and the
C++ key names). The summary text is made by torch 2.13's own `memory_summary` formatter over a known stats dict.
"""

from __future__ import annotations

import inspect
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, REPO, base_env, run_cli, stdio_client
from tools.core.context import ToolContext
from tools.memory.analyze import AnalyzeMemoryInput, AnalyzeMemoryResult, analyze_memory

pytestmark = pytest.mark.anyio

KiB, MiB, GiB = 2**10, 2**20, 2**30
TORCH_FILE = "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/linear.py"
MODEL = [{"filename": TORCH_FILE, "line": 125, "name": "forward"},
         {"filename": "/home/alice/proj/model.py", "line": 39, "name": "forward"},
         {"filename": "/home/alice/proj/train.py", "line": 80, "name": "main"},
         {"filename": "??", "line": 0, "name": "at::native::empty_cuda"}]
EVAL = [{"filename": "/Users/bob/proj/eval.py", "line": 12, "name": "evaluate"}]
LEAK = [{"filename": "/root/proj/train.py", "line": 91, "name": "main"}]
STATS = [{"filename": "/home/alice/proj/metrics.py", "line": 7, "name": "update"}]
MODEL_SITE = "~/proj/model.py:39 forward"


class Allocator:
    """Segments of blocks [address, size, state, frames] in address order; every action traced while recording."""

    def __init__(self, device: int = 0) -> None:
        self.device = device
        self.segments: list[dict[str, Any]] = []
        self.trace: list[dict[str, Any]] = []
        self.recording = False
        self.next_address = 0x7F0000000000 + device * 0x10000000000
        self.clock = 1_700_000_000_000_000

    def _record(self, action: str, addr: int, size: int, frames: list[dict[str, Any]] | None = None) -> None:
        if self.recording:
            self.clock += 1000
            entry = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.clock,
                     "frames": frames or []}
            if action == "oom":
                entry["device_free"] = entry.pop("addr")
            self.trace.append(entry)

    def alloc(self, size: int, frames: list[dict[str, Any]]) -> int:
        for segment in self.segments:
            for index, block in enumerate(segment["blocks"]):
                if block[2] == "inactive" and block[1] >= size:
                    rest = block[1] - size
                    segment["blocks"][index] = [block[0], size, "active_allocated", frames]
                    if rest:
                        segment["blocks"].insert(index + 1, [block[0] + size, rest, "inactive", []])
                    self._record("alloc", block[0], size, frames)
                    return int(block[0])
        address = self.next_address
        self.next_address += size + 2 * MiB
        self.segments.append({"address": address, "total_size": size,
                              "blocks": [[address, size, "active_allocated", frames]]})
        self._record("segment_alloc", address, size, frames)
        self._record("alloc", address, size, frames)
        return address

    def free(self, address: int) -> None:
        for segment in self.segments:
            blocks = segment["blocks"]
            for index, block in enumerate(blocks):
                if block[0] == address and block[2] == "active_allocated":
                    self._record("free_requested", address, block[1])
                    self._record("free_completed", address, block[1])
                    blocks[index] = [address, block[1], "inactive", []]
                    merged: list[list[Any]] = []
                    for item in blocks:
                        if merged and merged[-1][2] == "inactive" and item[2] == "inactive":
                            merged[-1][1] += item[1]
                        else:
                            merged.append(list(item))
                    segment["blocks"] = merged
                    return
        raise AssertionError(f"no live block at {address:#x}")

    def oom(self, size: int, device_free: int, frames: list[dict[str, Any]]) -> None:
        # Before raising, the allocator returns every fully free segment to CUDA and retries.
        for segment in [s for s in self.segments if all(b[2] == "inactive" for b in s["blocks"])]:
            self._record("segment_free", segment["address"], segment["total_size"])
            self.segments.remove(segment)
        self._record("oom", device_free, size, frames)

    def dump_segments(self, generation: str, block_frames: bool = True) -> list[dict[str, Any]]:
        out = []
        for segment in self.segments:
            allocated = sum(b[1] for b in segment["blocks"] if b[2] == "active_allocated")
            raw: dict[str, Any] = {"device": self.device, "address": segment["address"],
                                   "total_size": segment["total_size"], "allocated_size": allocated,
                                   "active_size": allocated, "stream": 0, "segment_type": "large"}
            if generation == "list":
                raw["blocks"] = [{"size": b[1], "state": b[2]} for b in segment["blocks"]]
            elif generation == "2.0":
                raw["blocks"] = [{"size": b[1], "state": b[2], **({"history": [
                    {"addr": b[0], "real_size": b[1], "frames": b[3]}]} if b[2] == "active_allocated" else {})}
                    for b in segment["blocks"]]
            else:
                raw.update(requested_size=allocated, segment_pool_id=(0, 0), is_expandable=False, frames=[])
                raw["blocks"] = [{"address": b[0], "size": b[1], "requested_size": b[1], "state": b[2],
                                  "frames": b[3] if block_frames else []} for b in segment["blocks"]]
            out.append(raw)
        return out

    def dump_trace(self, generation: str) -> list[dict[str, Any]]:
        if generation == "2.0":
            return [{k: v for k, v in e.items() if k != "time_us"} for e in self.trace]
        if generation == "2.5":
            return [{**e, "compile_context": "N/A", "user_metadata": ""} for e in self.trace]
        return self.trace


def snapshot(allocators: list[Allocator], generation: str, *, expandable: bool = False,
             block_frames: bool = True) -> Any:
    segments = [s for a in allocators for s in a.dump_segments(generation, block_frames)]
    if generation == "list":
        return segments
    traces: list[list[dict[str, Any]]] = [[] for _ in range(max(a.device for a in allocators) + 1)]
    for allocator in allocators:
        traces[allocator.device] = allocator.dump_trace(generation)
    data: dict[str, Any] = {"segments": segments, "device_traces": traces}
    if generation == "2.5":
        conf = "expandable_segments:True" if expandable else ""
        data["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": conf, "max_split_size": -1,
                                      "garbage_collection_threshold": 0.0, "expandable_segments": expandable,
                                      "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                                      "pinned_use_cuda_host_register": False,
                                      "roundup_power2_divisions": {"1": 0, "2": 0}}
        data["external_annotations"] = []
    return data


def write(path: Path, data: Any) -> Path:
    path.write_bytes(pickle.dumps(data))
    return path


def analyse(path: Path, root: Path | None = None, **args: Any) -> AnalyzeMemoryResult:
    params = AnalyzeMemoryInput(path=str(path), **args)
    return anyio.run(analyze_memory, params, ToolContext(roots=((root or path.parent).resolve(),)))


# ---------------------------------------------------------------------------------------------- scenarios


def fragmented() -> Allocator:
    """Ten 1 GiB segments, each with a live 512 MiB block and a 512 MiB hole; then 1 GiB is requested."""
    allocator = Allocator()
    allocator.recording = True
    for address in [allocator.alloc(GiB, MODEL) for _ in range(10)]:
        allocator.free(address)
    pairs = [(allocator.alloc(512 * MiB, MODEL), allocator.alloc(512 * MiB, MODEL)) for _ in range(10)]
    for hole, _ in pairs:
        allocator.free(hole)
    allocator.oom(GiB, 200 * MiB, MODEL)
    return allocator


def capacity_then_dumped_after_oom() -> Allocator:
    """2 GiB of weights before recording; each of ten activation segments holds a 1 MiB stats tensor and 7 GiB of
    activations; 8 GiB more is requested; the except handler frees the activations and dumps the snapshot."""
    allocator = Allocator()
    allocator.alloc(2 * GiB, MODEL)
    allocator.recording = True
    activations = []
    for _ in range(10):
        allocator.free(allocator.alloc(7 * GiB + MiB, MODEL))
        allocator.alloc(MiB, STATS)
        activations.append(allocator.alloc(7 * GiB, MODEL))
    allocator.oom(8 * GiB, GiB, MODEL)
    for address in activations:
        allocator.free(address)
    return allocator


def transient() -> Allocator:
    """4 GiB of weights; three training steps of 3 x 2 GiB activations; an eval step that keeps 8 x 2 GiB."""
    allocator = Allocator()
    allocator.alloc(4 * GiB, MODEL)
    allocator.recording = True
    for _ in range(3):
        for address in [allocator.alloc(2 * GiB, MODEL) for _ in range(3)]:
            allocator.free(address)
    for _ in range(8):
        allocator.alloc(2 * GiB, EVAL)
    allocator.oom(2 * GiB, 300 * MiB, EVAL)
    return allocator


def growing() -> Allocator:
    """1 GiB of weights; six steps of 2 GiB activations, each keeping a 512 MiB tensor alive (a kept loss)."""
    allocator = Allocator()
    allocator.alloc(GiB, MODEL)
    allocator.recording = True
    for _ in range(6):
        activation = allocator.alloc(2 * GiB, MODEL)
        allocator.alloc(512 * MiB, LEAK)
        allocator.free(activation)
    return allocator


# ------------------------------------------------------------------------------------------------- tests


async def test_verdicts_through_the_mcp_client(tmp_path: Path) -> None:
    files = {"fragmentation": write(tmp_path / "frag.pickle", snapshot([fragmented()], "2.1")),
             "capacity": write(tmp_path / "after_oom.pickle", snapshot([capacity_then_dumped_after_oom()], "2.5")),
             "transient_peak": write(tmp_path / "eval.pickle", snapshot([transient()], "2.5")),
             "growth": write(tmp_path / "leak.pickle", snapshot([growing()], "2.1", block_frames=False))}
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        results = {name: await client.call_tool("analyze_memory", {"path": str(path)})
                   for name, path in files.items()}
    for name, result in results.items():
        assert result.is_error is False, result.content[0].text
        data = result.structured_content
        assert data is not None and data["verdict"] == name, (name, data["evidence"])
        assert {"devices", "oom", "verdict", "top_sites"} <= set(data)
        assert "alice" not in result.content[0].text and "alice" not in json.dumps(data)

    frag = results["fragmentation"].structured_content
    assert frag is not None
    (device,) = frag["devices"]
    assert (device["reserved_bytes"], device["allocated_bytes"], device["inactive_bytes"],
            device["non_releasable_bytes"], device["largest_free_block_bytes"], device["peak_live_bytes"]) == (
        10 * GiB, 5 * GiB, 5 * GiB, 5 * GiB, 512 * MiB, 10 * GiB)
    assert frag["oom"] == {"device": 0, "requested_bytes": GiB, "free_bytes": 200 * MiB, "live_bytes": 5 * GiB,
                           "reserved_bytes": 10 * GiB, "site": MODEL_SITE, "source": "trace replay"}
    assert frag["fix"][0].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert frag["severity"] == "crit" and frag["format"] == "snapshot 2.1-2.4"

    capacity = results["capacity"].structured_content
    assert capacity is not None
    (device,) = capacity["devices"]
    # The segments as dumped (after the handler freed the activations) look fragmented...
    assert (device["reserved_bytes"], device["allocated_bytes"], device["non_releasable_bytes"],
            device["largest_free_block_bytes"]) == (72 * GiB + 10 * MiB, 2 * GiB + 10 * MiB, 70 * GiB, 7 * GiB)
    # ... but replayed to the OOM, the memory was in use: capacity.
    assert capacity["oom"]["live_bytes"] == 72 * GiB + 10 * MiB
    assert capacity["oom"]["reserved_bytes"] == 72 * GiB + 10 * MiB
    assert (capacity["oom"]["requested_bytes"], capacity["oom"]["free_bytes"]) == (8 * GiB, GiB)
    assert [(s["site"], s["bytes"], s["blocks"]) for s in capacity["top_sites"]] == [
        (MODEL_SITE, 70 * GiB, 10),
        ("(allocated before the trace began: weights, optimizer state)", 2 * GiB, 0),
        ("~/proj/metrics.py:7 update", 10 * MiB, 10)]
    assert capacity["top_sites_at"] == "the OOM (replayed)"
    assert any(n.startswith("The snapshot was taken after the OOM") for n in capacity["notes"])
    assert capacity["allocator_settings"]["expandable_segments"] == "False"
    assert capacity["fix"][-1] == f"start with the largest site: {MODEL_SITE}"

    eval_step = results["transient_peak"].structured_content
    assert eval_step is not None
    assert eval_step["oom"]["live_bytes"] == 20 * GiB and eval_step["oom"]["site"] == "~/proj/eval.py:12 evaluate"
    assert "That step needed 22.00 GiB, 2.2x the 10.00 GiB peak of the earlier steps." in eval_step["evidence"]

    leak = results["growth"].structured_content
    assert leak is not None and leak["oom"] is None and leak["severity"] == "warn"
    assert leak["evidence"][0] == ("Device 0: Live bytes after each of 6 steps rose from 1.50 GiB to 4.00 GiB: "
                                   "something keeps tensors alive across steps.")
    # The blocks were dumped without frames: their sites come from the trace's alloc at the same address.
    assert leak["top_sites"][0] == {"site": "~/proj/train.py:91 main", "bytes": 3 * GiB, "blocks": 6}
    assert leak["top_sites_at"] == "the snapshot"


@pytest.mark.parametrize("generation", ["2.0", "2.1", "2.5"])
def test_every_snapshot_generation_reads_the_same(tmp_path: Path, generation: str) -> None:
    result = analyse(write(tmp_path / "s.pickle", snapshot([fragmented()], generation)))
    (device,) = result.devices
    assert (device.reserved_bytes, device.allocated_bytes, device.largest_free_block_bytes, device.segments) == (
        10 * GiB, 5 * GiB, 512 * MiB, 10)
    assert result.verdict == "fragmentation" and result.oom is not None and result.oom.live_bytes == 5 * GiB
    assert result.format == {"2.0": "snapshot 2.0 (block history)", "2.1": "snapshot 2.1-2.4",
                             "2.5": "snapshot 2.5+"}[generation]
    assert result.top_sites[0].site == MODEL_SITE


def test_expandable_segments_already_on_changes_the_fix(tmp_path: Path) -> None:
    result = analyse(write(tmp_path / "s.pickle", snapshot([fragmented()], "2.5", expandable=True)))
    assert result.verdict == "fragmentation"
    assert result.fix[0].startswith("expandable_segments is already on: set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb")
    assert result.allocator_settings["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "roundup_power2_divisions" not in result.allocator_settings


def test_bare_segment_list(tmp_path: Path) -> None:
    allocator = fragmented()
    result = analyse(write(tmp_path / "segments.pickle", snapshot([allocator], "list")))
    assert result.format == "snapshot segment list (torch.cuda.memory_snapshot())"
    assert result.oom is None and result.verdict == "fragmentation"
    assert result.evidence[0] == ("Device 0: 5.00 GiB of 10.00 GiB reserved is free but inside segments that still "
                                  "hold live blocks; the largest free block is 512.00 MiB.")
    assert result.notes[-1].startswith("No trace in the snapshot")
    assert [(s.site, s.bytes, s.blocks) for s in result.top_sites] == [("(no stack recorded)", 5 * GiB, 10)]


def test_unbalanced_devices(tmp_path: Path) -> None:
    small, large = Allocator(0), Allocator(1)
    for allocator, gib in ((small, 8), (large, 20)):
        allocator.recording = True
        allocator.alloc(gib * GiB, MODEL)
    result = analyse(write(tmp_path / "s.pickle", snapshot([small, large], "2.5")))
    assert [(d.device, d.allocated_bytes, d.peak_live_bytes) for d in result.devices] == [(0, 8 * GiB, 8 * GiB),
                                                                                          (1, 20 * GiB, 20 * GiB)]
    assert result.verdict == "none"
    assert result.evidence[-1].startswith("Devices are unbalanced: device 1 holds 20.00 GiB, device 0 8.00 GiB")


def summary_text(stats: dict[str, int], abbreviated: bool = False) -> str:
    """torch 2.13's memory_summary formatter, run on `stats` (a CPU build has no allocator to ask)."""
    import torch.cuda.memory

    namespace = dict(vars(torch.cuda.memory))
    namespace.update(memory_stats=lambda device=None: stats, _get_device_index=lambda device, optional: 0)
    exec(inspect.getsource(torch.cuda.memory.memory_summary), namespace)  # noqa: S102 - torch's own source
    text: str = namespace["memory_summary"](0, abbreviated)
    return text


def stats_dict(allocated: int, reserved: int, non_releasable: int, ooms: int, retries: int,
               peak_allocated: int) -> dict[str, int]:
    stats: dict[str, int] = {"num_ooms": ooms, "num_alloc_retries": retries, "max_split_size": -1}
    values = {"allocated_bytes": allocated, "active_bytes": allocated, "requested_bytes": allocated,
              "reserved_bytes": reserved, "inactive_split_bytes": non_releasable, "allocation": 1200, "active": 1200,
              "segment": 40, "inactive_split": 30}
    for metric, value in values.items():
        for pool, share in (("all", 1.0), ("large_pool", 0.75), ("small_pool", 0.25)):
            current = int(value * share)
            peak = int(peak_allocated * share) if metric == "allocated_bytes" else current
            stats.update({f"{metric}.{pool}.current": current, f"{metric}.{pool}.peak": peak,
                          f"{metric}.{pool}.allocated": current * 5, f"{metric}.{pool}.freed": current * 4})
    for metric in ("oversize_allocations", "oversize_segments"):
        stats.update({f"{metric}.{k}": 0 for k in ("current", "peak", "allocated", "freed")})
    return dict(sorted(stats.items()))


def test_memory_summary_text(tmp_path: Path) -> None:
    text = summary_text(stats_dict(allocated=GiB, reserved=12 * GiB, non_releasable=10 * GiB, ooms=1, retries=3,
                                   peak_allocated=5 * GiB))
    assert "|                  PyTorch CUDA memory summary, device ID 0                 |" in text
    path = tmp_path / "summary.txt"
    path.write_text(text)
    result = analyse(path)
    (device,) = result.devices
    assert (device.reserved_bytes, device.allocated_bytes, device.non_releasable_bytes, device.peak_live_bytes,
            device.segments, device.source) == (12 * GiB, GiB, 10 * GiB, 5 * GiB, 40, "memory_summary")
    assert result.verdict == "fragmentation" and result.severity == "crit"
    assert "3 cudaMalloc retries" in result.evidence[0]


def test_real_old_style_summary_and_oom_line() -> None:
    summary = analyse(DATA / "memory" / "summary__pytorch-35901.txt")
    (device,) = summary.devices
    assert (device.reserved_bytes, device.allocated_bytes, device.peak_live_bytes) == (12420 * MiB, 1062 * MiB,
                                                                                       4877 * MiB)
    assert summary.verdict == "fragmentation" and summary.format == "memory_summary"
    both = analyse(DATA / "memory" / "oom_and_summary__fairseq-2442.log")
    assert both.format == "memory_summary + oom_log"
    assert both.oom is not None and both.oom.requested_bytes == 246 * MiB
    assert both.oom.live_bytes == 26 * GiB and both.oom.reserved_bytes == int(27.88 * GiB)
    # 1.88 GiB cached but unallocated could not hold 246 MiB: fragmentation (the summary shows 6 retries).
    assert both.verdict == "fragmentation"
    assert both.devices[0].allocated_bytes == 26377 * MiB


def test_memory_stats_json_and_repr(tmp_path: Path) -> None:
    stats = stats_dict(allocated=78 * GiB, reserved=79 * GiB, non_releasable=200 * MiB, ooms=2, retries=0,
                       peak_allocated=78 * GiB + 512 * MiB)
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    (tmp_path / "stats.txt").write_text(f"OrderedDict({sorted(stats.items())!r})")
    for name in ("stats.json", "stats.txt"):
        result = analyse(tmp_path / name)
        (device,) = result.devices
        assert (device.reserved_bytes, device.allocated_bytes, device.non_releasable_bytes,
                device.peak_live_bytes) == (79 * GiB, 78 * GiB, 200 * MiB, 78 * GiB + 512 * MiB), name
        assert result.verdict == "capacity" and result.severity == "crit" and result.format == "memory_stats"
    healthy = stats_dict(allocated=10 * GiB, reserved=11 * GiB, non_releasable=100 * MiB, ooms=0, retries=0,
                         peak_allocated=10 * GiB)
    (tmp_path / "ok.json").write_text(json.dumps({"cuda:0": healthy, "cuda:1": healthy}))
    result = analyse(tmp_path / "ok.json")
    assert [d.device for d in result.devices] == [0, 1] and result.verdict == "none" and result.severity == "ok"


@pytest.mark.parametrize(("log", "verdict", "requested", "live"), [
    ("cuda_oom__gpt4-llm-16.log", "fragmentation", 172 * MiB, int(73.95 * GiB)),
    ("cuda_oom__generateu-10.log", "capacity", 496 * MiB, int(14.06 * GiB)),
    ("cuda_oom__ms-swift-5943.log", "fragmentation", int(2.63 * GiB), int(48.16 * GiB)),
    ("cuda_oom__axolotl-1717.log", "capacity", int(3.91 * GiB), int(19.16 * GiB)),
])
def test_real_oom_messages(log: str, verdict: str, requested: int, live: int) -> None:
    result = analyse(DATA / "logs" / "public" / log)
    assert result.format == "oom_log" and result.verdict == verdict and result.severity == "crit"
    assert result.oom is not None and (result.oom.requested_bytes, result.oom.live_bytes) == (requested, live)
    if log == "cuda_oom__ms-swift-5943.log":
        # 79.11 GiB total, 2.61 GiB free, 51.64 GiB reserved by PyTorch: 24.86 GiB held by others.
        assert any(e.startswith("24.86 GiB of the 79.11 GiB GPU is held outside") for e in result.evidence)
        assert any("private pools" in n for n in result.notes)


async def test_hostile_and_broken_inputs_are_refused_clearly(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (subprocess.call, (["touch", str(marker)],))

    write(tmp_path / "evil.pickle", {"segments": [Exploit()], "device_traces": []})
    (tmp_path / "empty.pickle").write_bytes(b"")
    (tmp_path / "cut.pickle").write_bytes(pickle.dumps(snapshot([fragmented()], "2.5"))[:300])
    write(tmp_path / "other.pickle", {"entries": [], "version": "2.10"})
    (tmp_path / "noise.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "plain.log").write_text("step 1 loss 2.0\nstep 2 loss 1.9\n")
    good = write(tmp_path / "good.pickle", snapshot([fragmented()], "2.5"))
    expected = {"evil.pickle": "refused without running anything", "empty.pickle": "is empty",
                "cut.pickle": "is not a readable pickle", "other.pickle": "not an allocator snapshot",
                "noise.bin": "is binary but not a pickle", "other.json": "neither memory_stats() nor an allocator",
                "plain.log": "holds no allocator snapshot, memory_summary() table",
                "/etc/passwd": "outside the allowed"}
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        with anyio.fail_after(60):
            answers = {name: await client.call_tool("analyze_memory", {
                "path": name if name.startswith("/") else str(tmp_path / name)}) for name in expected}
            still = await client.call_tool("analyze_memory", {"path": str(good)})
    assert not marker.exists()
    for name, text in expected.items():
        answer = answers[name]
        assert answer.is_error, name
        assert text in answer.content[0].text and "Traceback" not in answer.content[0].text, (name, answer.content)
    assert still.is_error is False and still.structured_content is not None
    assert still.structured_content["verdict"] == "fragmentation"


def test_cli_and_report(tmp_path: Path) -> None:
    path = write(tmp_path / "after_oom.pickle", snapshot([capacity_then_dumped_after_oom()], "2.5"))
    done = run_cli(["analyze-memory", str(path), "--json", "--root", str(tmp_path)], base_env())
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["verdict"] == "capacity"
    report = subprocess.run([sys.executable, "-m", "mcp_server.cli", "report", "--no-health", "--memory", str(path),
                             "--json", "--root", str(tmp_path)], cwd=REPO, env=base_env(), capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 2, report.stderr
    data = json.loads(report.stdout)
    assert [r["tool"] for r in data["runs"]] == ["analyze_memory"]
    (row,) = data["rows"]
    assert (row["source"], row["branch"]) == ("analyze_memory", "oom")
    assert row["symptom"] == "capacity: GPU memory, CUDA OOM"
    assert "gpu-triage report: memory ..." in report.stderr


def test_triage_plan_routes_oom_to_analyze_memory() -> None:
    from tools.triage.plan import TriagePlanInput, triage_plan

    ctx = ToolContext(roots=())
    for symptom in ("torch.OutOfMemoryError: CUDA out of memory at step 200", "显存不够 OOM"):
        plan = anyio.run(triage_plan, TriagePlanInput(symptom=symptom, memory="runs/snap.pickle"), ctx)
        assert plan.branch == "oom", symptom
        memory = next(s for s in plan.steps if s.tool == "analyze_memory")
        assert (memory.step, memory.arguments, memory.needs) == ("memory", {"path": "runs/snap.pickle"}, [])
    bare = anyio.run(triage_plan, TriagePlanInput(symptom="CUDA OOM"), ctx)
    memory = next(s for s in bare.steps if s.tool == "analyze_memory")
    assert memory.needs == ["memory snapshot or memory_summary"]


def test_an_empty_snapshot_cannot_tell(tmp_path: Path) -> None:
    # What _dump_snapshot() writes in a process that never allocated on the GPU (the wrong rank, or too early):
    # no segment, an empty trace. "No OOM, no fragmentation" would be a verdict on nothing.
    result = analyse(write(tmp_path / "idle.pickle", snapshot([Allocator(0)], "2.5")))
    assert (result.severity, result.verdict) == ("unknown", "none")
    [entry] = result.coverage
    assert entry.status.value == "not_understood" and entry.detail == "the allocator held no memory when it was dumped"
    assert entry.formats_known is not None and any("memory_summary" in f for f in entry.formats_known)
    assert result.decides is not None and "_record_memory_history()" in result.decides
    done = run_cli(["analyze-memory", "idle.pickle", "--root", str(tmp_path)], base_env())
    assert done.returncode == 4, done.stderr


def test_coverage_says_what_each_input_held(tmp_path: Path) -> None:
    # A snapshot with its trace is read whole; the bare segment list has no trace: the dump's moment only.
    traced = analyse(write(tmp_path / "s.pickle", snapshot([fragmented()], "2.5")))
    assert traced.coverage[0].status.value == "read" and traced.coverage[0].detail.endswith("trace of device(s) 0")
    small = Allocator(0)
    small.alloc(2 * GiB, MODEL)
    bare = analyse(write(tmp_path / "segments.pickle", snapshot([small], "list")))
    assert (bare.severity, bare.verdict) == ("ok", "none")
    assert bare.coverage[0].status.value == "partial" and "no peak, growth or OOM replay" in bare.coverage[0].detail
    assert bare.conclusion[-1].startswith("Judged from the moment of the dump only (no trace)")
    healthy = stats_dict(allocated=10 * GiB, reserved=11 * GiB, non_releasable=100 * MiB, ooms=0, retries=0,
                         peak_allocated=10 * GiB)
    (tmp_path / "ok.json").write_text(json.dumps(healthy))
    stats = analyse(tmp_path / "ok.json")
    assert stats.severity == "ok" and [(c.status.value, c.detail) for c in stats.coverage] == [
        ("read", "memory_stats: 1 device(s)")]
    oom = analyse(DATA / "logs" / "public" / "cuda_oom__generateu-10.log")
    assert [(c.status.value, c.detail) for c in oom.coverage] == [("read", "oom_log: 1 OOM message(s)")]
