"""check_interconnect: the culprit named through the real MCP server (a node on sockets, the slow node of a set of
nccl-tests pairs, a degraded GPU pair), the real outputs of public threads (tests/data/interconnect/wild, their
PROVENANCE.md), and bad inputs refused clearly with the server still answering."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.helpers import DATA, base_env, pid_alive, run_cli, stdio_client, structured, with_fake_smi
from tools.core.context import ToolContext
from tools.core.errors import LimitExceeded, UnreadableInput
from tools.interconnect import CheckInterconnectInput, CheckInterconnectResult, check_interconnect

WILD = DATA / "interconnect" / "wild"


def check(root: Path, **arguments: Any) -> CheckInterconnectResult:
    return anyio.run(check_interconnect, CheckInterconnectInput(**arguments), ToolContext(roots=(root.resolve(),)))


def _ib_node(host: str, base: int, ranks: range) -> list[str]:
    """NCCL 2.18 INFO lines of a healthy node, one process per GPU: IB with GPU Direct RDMA, P2P within the node."""
    lines = []
    for rank in ranks:
        pid, dev = base + rank, rank % 8
        head = f"{host}:{pid}:{pid + 1} [{dev}] NCCL INFO"
        lines += [f"{host}:{pid}:{pid} [{dev}] NCCL INFO NCCL version 2.18.3+cuda12.2",
                  f"{head} Bootstrap : Using ib0:10.0.0.{base % 250}<0>",
                  f"{head} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.{base % 250}<0>",
                  f"{head} Using network IB",
                  f"{head} comm 0x55d1 rank {rank} nRanks 24 nNodes 3 localRanks 8 localRank {dev} MNNVL 0",
                  f"{head} Channel 00/0 : {rank}[{dev}] -> {rank + 1}[{(dev + 1) % 8}] via P2P/IPC"]
    lines.append(f"{host}:{base + ranks[-1]}:1 [7] NCCL INFO Channel 00/0 : {ranks[-1]}[7] -> {ranks[-1] + 1}[0] "
                 "[send] via NET/IB/0/GDRDMA")
    return lines


def _socket_node(host: str, base: int, ranks: range) -> list[str]:
    """The same job's third node, where the container has no verbs library: NCCL falls back to sockets (mpirun's
    --tag-output prefixes)."""
    lines = []
    for rank in ranks:
        pid, dev = base + rank, rank % 8
        head = f"[1,{rank}]<stdout>:{host}:{pid}:{pid + 1} [{dev}]"
        lines += [f"{head} NCCL INFO Bootstrap : Using eth0:10.0.1.7<0>",
                  f"{head} misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
                  f"{head} NCCL INFO NET/Socket : Using [0]eth0:10.0.1.7<0>",
                  f"{head} NCCL INFO Using network Socket",
                  f"{head} NCCL INFO comm 0x7f11 rank {rank} nRanks 24 nNodes 3 localRanks 8 localRank {dev} MNNVL 0"]
    lines.append(f"[1,23]<stdout>:{host}:{base + 23}:1 [7] NCCL INFO Channel 00/0 : 23[7] -> 0[0] [send] via "
                 "NET/Socket/0")
    return lines


def _nccl_tests(hosts: tuple[str, str], busbw_at_8g: float) -> str:
    """An all_reduce_perf run over two 8-GPU H100 nodes (nccl-tests 2.13+ columns)."""
    lines = ["# nThread 1 nGpus 1 minBytes 1048576 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for rank in range(16):
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {1000 + rank:6d} on {hosts[rank // 8]:>10s} device "
                     f"{rank % 8:2d} [0x{rank:02x}] NVIDIA H100 80GB HBM3")
    lines += ["#", "#                                                              out-of-place                     "
              "  in-place", "#       size         count      type   redop    root     time   algbw   busbw #wrong"
              "     time   algbw   busbw #wrong"]
    size = 1048576
    while size <= 8589934592:
        busbw = busbw_at_8g * min(1.0, size / 1073741824)
        lines.append(f"{size:12d} {size // 4:12d}     float     sum      -1   100.0  {busbw / 1.875:6.2f}  "
                     f"{busbw:6.2f}      0   100.0  {busbw / 1.875:6.2f}  {busbw:6.2f}      0")
        size *= 4
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {busbw_at_8g / 3:.4f}", "#"]
    return "\n".join(lines) + "\n"


def _topo_h100(degraded: tuple[int, int] | None) -> str:
    """nvidia-smi topo -m of an 8-GPU NVSwitch board (tab-separated, as the tool prints it; ANSI header)."""
    header = ("\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\t"
              "GPU NUMA ID\x1b[0m")
    rows = [header]
    for i in range(8):
        cells = ["X" if i == j else ("NV12" if degraded and {i, j} == set(degraded) else "NV18") for j in range(8)]
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{'PIX' if i < 2 else 'SYS'}\t0-55\t0\t\tN/A")
    rows.append("NIC0\t" + "\t".join("PIX" if i < 2 else "SYS" for i in range(8)) + "\t X ")
    rows += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks", "",
             "NIC Legend:", "", "  NIC0: mlx5_0"]
    return "\n".join(rows) + "\n"


@pytest.mark.anyio
async def test_the_culprit_is_named_through_mcp(tmp_path: Path) -> None:
    # A 3-node job: node-c's container has no libibverbs, so its inter-node traffic goes over TCP.
    log = _ib_node("node-a", 4100, range(8)) + _ib_node("node-b", 4200, range(8, 16)) + _socket_node(
        "node-c", 4300, range(16, 24))
    (tmp_path / "job.log").write_text("\n".join(log) + "\n")
    # nccl-tests per node pair: every pair with node-c is slow.
    for name, hosts, busbw in (("ab", ("node-a", "node-b"), 352.0), ("ac", ("node-a", "node-c"), 11.8),
                               ("bc", ("node-b", "node-c"), 12.1), ("ad", ("node-a", "node-d"), 349.5)):
        (tmp_path / f"pair-{name}.txt").write_text(_nccl_tests(hosts, busbw))
    (tmp_path / "node-a").mkdir()
    (tmp_path / "node-a" / "topo.txt").write_text(_topo_h100(degraded=(2, 5)))
    async with stdio_client(base_env(), "--root", str(tmp_path)) as client:
        found = structured(await client.call_tool("check_interconnect", {
            "nccl_logs": ["job.log"], "nccl_tests": ["pair-*.txt"], "captures": ["node-a/topo.txt"]}))
    kinds = {(f["kind"], f["node"]) for f in found["findings"]}
    assert ("socket_fallback", "node-c") in kinds
    assert ("busbw_low", "node-c") in kinds  # the node in every slow pair and in no healthy one
    assert ("topo_degraded", "node-a") in kinds
    assert found["severity"] == "crit" and found["verdict"] in {"socket_fallback", "busbw_low", "topo_degraded"}
    socket = next(f for f in found["findings"] if f["kind"] == "socket_fallback")
    assert socket["rank"] == "16-23" and "NET/Socket" in socket["evidence"]
    warn = next(f for f in found["findings"] if f["kind"] == "nccl_warn")
    assert "Failed to open libibverbs" in warn["evidence"] and warn["node"] == "node-c"
    degraded = next(f for f in found["findings"] if f["kind"] == "topo_degraded" and "GPU2-GPU5" in f["evidence"])
    assert "NV12 where the other GPU pairs are NV18" in degraded["evidence"]
    rows = {b["file"]: b for b in found["bandwidth"]}
    assert rows["pair-ab.txt"]["peak_busbw_gbs"] == 352.0 and rows["pair-ab.txt"]["size_at_peak_bytes"] == 4294967296
    assert rows["pair-ac.txt"]["ranks"] == 16 and rows["pair-ac.txt"]["nodes"] == "node-a, node-c"
    assert {t["node"]: t["network"] for t in found["transports"]} == {"node-a": "IB", "node-b": "IB",
                                                                        "node-c": "Socket"}


def test_busbw_against_the_fabrics_figure(tmp_path: Path) -> None:
    # Two H100 nodes with 8 NDR rails each (ibstat of node-a): 8 x 400 Gb/s x 96 % = 384 GB/s, capped by the
    # board's NVLink at 370. A run at 150 GB/s is 41 %: critical.
    (tmp_path / "node-a").mkdir()
    ports = "".join(f"CA 'mlx5_{i}'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
                    f"\t\tRate: 400\n\t\tLink layer: InfiniBand\n" for i in range(8))
    (tmp_path / "node-a" / "ibstat.txt").write_text(ports)
    (tmp_path / "run.txt").write_text(_nccl_tests(("node-a", "node-b"), 150.0))
    result = check(tmp_path, nccl_tests=["run.txt"], captures=["node-a/ibstat.txt"])
    row = result.bandwidth[0]
    assert (row.expected_busbw_gbs, row.ratio) == (370.0, round(150.0 / 370.0, 3))
    assert "capped by the node's NVLink" in (row.expected_from or "")
    assert [(f.kind, f.severity.value) for f in result.findings] == [("busbw_low", "crit")]
    # The caller's figure wins over the table.
    given = check(tmp_path, nccl_tests=["run.txt"], expected_busbw_gbs=160.0)
    assert given.bandwidth[0].ratio == 0.938 and given.findings == []


def test_every_real_output_parses_and_the_verdicts_hold() -> None:
    labels = [json.loads(line) for manifest in sorted(WILD.glob("cases_*.jsonl"))
              for line in manifest.read_text().splitlines() if line.strip()]
    assert len(labels) >= 100
    argument = {"nccl_log": "nccl_logs", "nccl_tests": "nccl_tests"}
    misses = []
    for label in labels:
        result = check(WILD, **{argument.get(label["kind"], "captures"): [label["file"]]})
        # A finding at severity unknown is no verdict (it names what would decide): the verdicts are warn and crit.
        if {f.kind for f in result.findings if f.severity.value in ("warn", "crit")} != set(label["findings"]):
            misses.append(label["file"])
        if label["kind"] == "nccl_tests" and isinstance(label["facts"].get("peak_busbw_gbs"), int | float):
            peak = max(b.peak_busbw_gbs or 0 for b in result.bandwidth)
            assert abs(peak - label["facts"]["peak_busbw_gbs"]) <= 0.01 * label["facts"]["peak_busbw_gbs"]
    assert 1 - len(misses) / len(labels) >= 0.95, misses
    # The known misses: sockets (or loopback) on a job whose log never shows it spans nodes (the thread says it does):
    # answered unknown with what decides; EFA without /GDRDMA on hardware the log does not name; and a board with
    # fewer NICs than GPUs labelled as a fault, which issue 32 defines as design (a GPU with no near NIC has none to
    # be moved to: round 4's liguodongiot-llm-action-2 is labelled so).
    assert set(misses) <= {"socketifname-2node__nccl-810.log", "socket-noroute-accelerate__nccl-1105.log",
                           "fastsocket-gcp-a100__nccl-651.log", "efa-nogdr-p4-2.7.8__aws-ofi-nccl-64.log",
                           "lo-bootstrap-docker__nccl-300.log", "ifname-lo-bgp__nccl-1053.log",
                           "topo__NVIDIA-nccl-1591.txt"}, misses


def test_a_binary_built_without_mpi_is_told_from_its_output() -> None:
    result = check(WILD, nccl_tests=["nccl_tests__NVIDIA-nccl-tests-213.txt"])
    assert [f.kind for f in result.findings] == ["single_process_test"]
    assert "nothing crossed the network" in result.findings[0].evidence


def test_bad_inputs_are_clear_and_bounded(tmp_path: Path) -> None:
    (tmp_path / "junk.bin").write_bytes(os.urandom(4096) + b"\x00" * 4096)
    with pytest.raises(UnreadableInput, match="binary"):
        check(tmp_path, captures=["junk.bin"])
    big = tmp_path / "huge.txt"
    with big.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    with pytest.raises(LimitExceeded, match="read up to"):
        check(tmp_path, nccl_tests=["huge.txt"])
    # A 2 GB job log (16 KiB of text, then a sparse hole) is one streamed pass within the deadline, not a read into
    # memory; a file that starts binary is said to be so.
    log = tmp_path / "job.log"
    with log.open("wb") as handle:
        handle.write(b"node1:1:1 [0] NCCL INFO Using network Socket\n" + b"node1:1:1 [0] step 1 loss 2.3\n" * 560)
        handle.truncate(2 * 1024**3)
    started = time.monotonic()
    try:
        result = check(tmp_path, nccl_logs=["job.log"])
        assert result.transports[0].network == "Socket"
    except LimitExceeded as exc:  # a slow machine: the deadline ends it, said clearly
        assert "out of time" in str(exc)
    assert time.monotonic() - started < 130
    (tmp_path / "zeros.log").write_bytes(b"\x00" * 9000)
    assert any("binary" in n for n in check(tmp_path, nccl_logs=["zeros.log"]).notes)
    # A table cut in the middle of a row keeps the rows before it.
    text = _nccl_tests(("a", "b"), 200.0)
    (tmp_path / "cut.txt").write_text(text[: text.index("268435456") + 20])
    cut = check(tmp_path, nccl_tests=["cut.txt"])
    assert cut.bandwidth[0].peak_busbw_gbs == round(200.0 * 67108864 / 1073741824, 2)
    with pytest.raises(ValueError, match="at least one"):
        CheckInterconnectInput()


def test_the_report_takes_the_interconnect() -> None:
    from tools.triage import TriageReportInput, triage_report

    report = anyio.run(triage_report, TriageReportInput(health=False, nccl_logs=["socketfallback-hpcx__nccl-952.log"],
                                                        nccl_tests=["nccl_tests__NVIDIA-nccl-tests-213.txt"]),
                       ToolContext(roots=(WILD.resolve(),)))
    assert [r.tool for r in report.runs] == ["check_interconnect"]
    assert [r.symptom for r in report.rows] == ["socket_fallback: interconnect", "single_process_test: interconnect"]
    assert report.rows[0].branch == "nccl_hang_or_slow" and "rank ?" not in report.rows[0].root_cause


def test_live_mode_runs_the_real_programs_and_refuses_an_injected_interface(tmp_path: Path) -> None:
    # nvidia-smi is the allowed stand-in, replaying a real H100 board's topo -m (tests/data/interconnect/wild);
    # ibstat (infiniband-diags, no IB device here) and ethtool run for real.
    argv_log = tmp_path / "smi-argv.jsonl"
    env = with_fake_smi(base_env(PATH=f"{os.environ.get('PATH', '')}:/usr/sbin"), "capture:none", argv_log)
    env["FAKE_SMI_TOPO"] = str(WILD / "topo__stas00-ml-engineering-4.txt")
    done = run_cli(["check-interconnect", "--live", "--interfaces", "lo", "--json", "--root", str(tmp_path)], env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    links = {(link["kind"], link["name"]): link for link in data["links"]}
    assert links[("gpu_pair", "28 GPU pairs")]["state"] == "NV18"
    assert links[("eth", "lo")]["state"] == "link up"
    assert any(note.startswith("ibstat: no output (no IB device") for note in data["notes"]), data["notes"]
    assert any("nvidia-smi nvlink -s: no output" in note for note in data["notes"])
    assert data["verdict"] == "healthy"
    assert sorted(json.loads(line)["argv"][:2] for line in argv_log.read_text().splitlines()) == [
        ["nvlink", "-e"], ["nvlink", "-s"], ["topo", "-m"], ["topo", "-p2p"]]
    # An interface name that is an argument injection: refused before anything runs.
    argv_log.unlink()
    bad = run_cli(["check-interconnect", "--live", "--interfaces", "-s eth0 speed 10", "--json"], env)
    assert bad.returncode == 3 and "not an interface name" in bad.stderr
    assert not argv_log.exists()
    missing = run_cli(["check-interconnect", "--live", "--interfaces", "ib7", "--json"], env)
    assert missing.returncode == 3 and "this node has no interface 'ib7'" in missing.stderr


def test_nccl_tests_json_is_read_by_its_keys_and_its_env_never(tmp_path: Path) -> None:
    # The shape nccl-tests' -J writes (NVIDIA/nccl-tests src/util.cu, v2.19.6): a hand-built document, since no
    # public -J output was found; its `env` holds the whole environment, here a token that must never come out.
    document = {
        "version": 1, "args": ["./all_reduce_perf", "-J", "out.json"], "env": ["HF_TOKEN=hf_FAKEtestTOKEN0json0check0"],
        "nccl_version": 22703, "config": {"nthreads": 1, "ngpus": 1},
        "devices": [{"rank": r, "group": 0, "pid": 100 + r, "hostname": f"node{r // 8}", "device": r % 8,
                     "device_hex": "0000:1b:00", "device_info": "NVIDIA H100 80GB HBM3"} for r in range(16)],
        "results": [{"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": "-1",
                     "experiment_name": "all_reduce_perf",
                     "out_of_place": {"time": 10.0, "alg_bw": 1.0, "bus_bw": bw, "nwrong": 0},
                     "in_place": {"time": 10.0, "alg_bw": 1.0, "bus_bw": bw - 1, "nwrong": wrong}}
                    for size, bw, wrong in ((1 << 20, 20.0, 0), (1 << 30, 180.5, 0), (1 << 33, 178.0, 3))],
        "out_of_bounds": {"count": 3, "okay": False},
        "average_bus_bandwidth": {"bandwidth": 125.8, "okay": "unchecked"},
    }
    (tmp_path / "out.json").write_text(json.dumps(document))
    result = check(tmp_path, nccl_tests=["out.json"])
    row = result.bandwidth[0]
    assert (row.collective, row.ranks, row.nodes, row.peak_busbw_gbs, row.size_at_peak_bytes, row.wrong,
            row.avg_busbw_footer) == ("all_reduce", 16, "node0, node1", 180.5, 1 << 30, 3, 125.8)
    assert [f.kind for f in result.findings] == ["wrong_results"]
    assert "hf_FAKE" not in result.model_dump_json()


def test_gdr_is_judged_on_the_receive_side_and_a_link_local_bootstrap_is_refused(tmp_path: Path) -> None:
    head = "n{node}:7{node}:7{node} [0] NCCL INFO"
    lines = []
    for node in (1, 2):
        prefix = head.format(node=node)
        lines += [f"{prefix} Bootstrap : Using ib0:fe80::a288:c203:d2:aa{node}%ib0<0>",
                  f"{prefix} NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:fe80::a288:c203:d2:aa{node}%ib0<0>",
                  f"{prefix} Using network IB",
                  # GDR write on the receive side, no GDR read on the send side: NCCL's default, no fault.
                  f"{prefix} Channel 00/0 : {node}[0] -> {node % 2}[0] [receive] via NET/IB/0/GDRDMA",
                  f"{prefix} Channel 00/0 : {node % 2}[0] -> {node}[0] [send] via NET/IB/0"]
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    result = check(tmp_path, nccl_logs=["job.log"])
    assert [(f.kind, f.node) for f in result.findings] == [("wrong_interface", "n1"), ("wrong_interface", "n2")]
    assert "only an IPv6 link-local address" in result.findings[0].evidence
    # The receive side without it is staged through host memory.
    routable = [line.replace("[receive] via NET/IB/0/GDRDMA", "[receive] via NET/IB/0")
                .replace("fe80::a288:c203:d2:aa", "10.0.0.") for line in lines]
    (tmp_path / "nogdr.log").write_text("\n".join(routable))
    assert {f.kind for f in check(tmp_path, nccl_logs=["nogdr.log"]).findings} == {"no_gdr"}


@pytest.mark.anyio
async def test_a_fifo_in_place_of_any_input_is_refused_at_once_and_the_server_answers_after(tmp_path: Path) -> None:
    # No writer ever comes: opening any of these for reading the usual way would wait forever.
    for name in ("capture.txt", "job.log", "run.txt", "iostat.txt", "record.txt"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "ok.txt").write_text(_topo_h100(degraded=None))
    calls = [("check_interconnect", {"captures": ["capture.txt"]}), ("check_interconnect", {"nccl_logs": ["job.log"]}),
             ("check_interconnect", {"nccl_tests": ["run.txt"]}), ("sample_host", {"from_files": ["iostat.txt"]}),
             ("profile_cpu", {"from_files": ["record.txt"]})]
    async with stdio_client(base_env(), "--root", str(tmp_path), "--timeout", "20") as client:
        for tool, arguments in calls:
            started = time.monotonic()
            answer = await client.call_tool(tool, arguments)
            said = getattr(answer.content[0], "text", "")  # the error's text part
            assert answer.is_error and "is a FIFO, not a regular file" in said, (tool, answer)
            assert time.monotonic() - started < 5, tool
        after = structured(await client.call_tool("check_interconnect", {"captures": ["ok.txt"]}))
    assert {(link["name"], link["state"]) for link in after["links"]} == {("28 GPU pairs", "NV18")}


@pytest.mark.anyio
async def test_a_wedged_nvidia_smi_in_live_mode_ends_at_the_deadline_and_is_killed(tmp_path: Path) -> None:
    # The stand-in's hang mode: a real process that never exits, as nvidia-smi on a lost GPU does.
    pidfile = tmp_path / "smi.pid"
    env = with_fake_smi(base_env(PATH=f"{os.environ.get('PATH', '')}:/usr/sbin"), "hang")
    env["FAKE_SMI_PIDFILE"] = str(pidfile)
    async with stdio_client(env, "--root", str(tmp_path), "--timeout", "6") as client:
        started = time.monotonic()
        data = structured(await client.call_tool("check_interconnect", {"live": True, "interfaces": ["lo"]}))
        elapsed = time.monotonic() - started
        again = structured(await client.call_tool("check_interconnect", {"live": True, "interfaces": ["lo"]}))
    assert elapsed < 6, elapsed
    # topo -m, topo -p2p r, nvlink -s and nvlink -e: each one killed at its own bound.
    assert sum("nvidia-smi" in note and "time" in note for note in data["notes"]) == 4, data["notes"]
    assert {(link["kind"], link["name"]) for link in data["links"]} == {("eth", "lo")}  # ethtool still answered
    assert again["links"] == data["links"]
    assert not pid_alive(int(pidfile.read_text()))


def test_a_busbw_with_no_figure_to_judge_it_by_is_unknown() -> None:
    # Issue 30: a low busbw with nothing that says what the fabric gives was "No interconnect problem found", ok.
    # Round 4 dev, aws-samples/awsome-inference: 78.92 GB/s across nodes, no GPU name or NIC rate in the file.
    folder = DATA / "interconnect" / "round4" / "dev"
    name = "nccl_tests__aws-samples-awsome-inference-1.txt"
    context = ToolContext(roots=(folder.resolve(),), timeout_s=60)
    result = anyio.run(check_interconnect, CheckInterconnectInput(nccl_tests=[name]), context)
    assert result.severity.value == "unknown" and result.verdict == "unknown" and not result.findings
    assert result.decides and "ibstat" in result.decides and "expected_busbw_gbs" in result.decides
    assert [(c.input, c.status.value) for c in result.coverage] == [(name, "read")]
    assert "78.92 GB/s" in result.conclusion[0]
    # With the figure (eight 400G NICs a node: ~384 GB/s) the same run is judged: low.
    judged = anyio.run(check_interconnect, CheckInterconnectInput(nccl_tests=[name], expected_busbw_gbs=384),
                       context)
    assert judged.severity.value in ("warn", "crit") and {f.kind for f in judged.findings} == {"busbw_low"}
    # CCI-MOC/roce-testing: 2 nodes x 4 H100 at 5.86 GB/s, its NIC's rate nowhere: below even the least a multi-node
    # H100 platform carries (one 100 Gb/s NIC a node), so low without the figure (issue 32).
    floor = anyio.run(check_interconnect, CheckInterconnectInput(nccl_tests=["nccl_tests__cci-moc-roce-testing-2.txt"]),
                      context)
    assert [(f.kind, f.severity.value) for f in floor.findings] == [("busbw_low", "crit")]  # 49 %
    assert floor.bandwidth[0].expected_busbw_gbs == 12.0


def test_a_capture_it_does_not_read_is_a_coverage_row() -> None:
    result = anyio.run(check_interconnect, CheckInterconnectInput(captures=["mpstat__naarad-188-old-layout.txt"]),
                       ToolContext(roots=((DATA / "host").resolve(),), timeout_s=60))
    row = result.coverage[0]
    assert row.status.value == "not_understood" and row.formats_known and "ibstat" in row.formats_known
