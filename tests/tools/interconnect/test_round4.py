"""check_interconnect on round 4's development outputs (tests/data/interconnect/round4/dev; each file's source is
its line in dev/cases.jsonl and PROVENANCE_i4*.md): PCIe links, IB rates, P2P and interfaces, NCCL's own topology,
and the fabric's figure from what the files say. The held-out part is never read here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from benchmarks import accuracy_interconnect
from tests.helpers import DATA
from tools.core.context import ToolContext
from tools.interconnect import CheckInterconnectInput, CheckInterconnectResult, check_interconnect

DEV = DATA / "interconnect" / "round4" / "dev"
WILD = DATA / "interconnect" / "wild"


def check(root: Path, **arguments: Any) -> CheckInterconnectResult:
    return anyio.run(check_interconnect, CheckInterconnectInput(**arguments),
                     ToolContext(roots=(root.resolve(),), timeout_s=60))


def kinds(result: CheckInterconnectResult) -> list[tuple[str, str]]:
    return [(f.kind, f.severity.value) for f in result.findings]


def test_a_pcie_width_below_the_link_s_is_degraded_on_a_device_of_the_job() -> None:
    # geerlingguy/raspberry-pi-pcie-devices#143: a ConnectX-3 (Gen3 x4) in the CM4's one Gen2 lane.
    result = check(DEV, captures=["lspci__geerlingguy-raspberry-pi-pcie-devices-143.txt"])
    assert kinds(result) == [("pcie_degraded", "warn")]
    assert "Gen2 x1 of Gen3 x4" in result.findings[0].evidence and "1 lane(s) of 4" in result.findings[0].evidence
    assert [(link.state, link.expected) for link in result.links] == [("Gen2 x1", "Gen3 x4")]


def test_a_usb_controller_at_fewer_lanes_is_noted_not_judged(tmp_path: Path) -> None:
    # A whole `lspci -vv` (pciutils' layout) lists every device: a USB 3 controller trained at x1 of its x2 carries
    # nothing of a GPU job's, so it is a note; the GPU beside it, at its full link, is read and ok.
    (tmp_path / "lspci.txt").write_text(
        "03:00.0 USB controller: ASMedia Technology Inc. ASM2142 USB 3.1 Host Controller (prog-if 30 [XHCI])\n"
        "\t\tLnkCap:\tPort #0, Speed 8GT/s, Width x2, ASPM L0s L1, Exit Latency L0s <2us, L1 <16us\n"
        "\t\tLnkSta:\tSpeed 8GT/s (ok), Width x1 (downgraded)\n"
        "41:00.0 VGA compatible controller: NVIDIA Corporation GA102 [GeForce RTX 3090] (rev a1) (prog-if 00 [VGA])\n"
        "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L0s L1, Exit Latency L0s <512ns, L1 <4us\n"
        "\t\tLnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)\n")
    result = check(tmp_path, captures=["lspci.txt"])
    assert result.severity.value == "ok" and kinds(result) == []
    assert any("USB controller" in note and "not judged" in note for note in result.notes)


def test_a_speed_capped_by_the_target_link_speed_is_degraded() -> None:
    # ROCm/tensorflow-upstream#92: a Gen2 x1 port at Gen1 with LnkCtl2's target set to 2.5GT/s.
    result = check(DEV, captures=["lspci__rocm-tensorflow-upstream-92.txt"])
    assert kinds(result) == [("pcie_degraded", "warn")]
    assert "target speed to Gen1" in result.findings[0].evidence


def test_an_idle_looking_gpu_at_gen1_is_unknown_with_what_decides() -> None:
    # neuropoly/intranet.neuro.polymtl.ca: an RTX A6000 at 2.5GT/s (downgraded), x16 (ok), on an idle box.
    result = check(DEV, captures=["lspci__neuropoly-intranet-neuro-polymtl-ca-1.txt"])
    assert result.severity.value == "unknown" and result.verdict == "unknown"
    assert kinds(result) == [("pcie_degraded", "unknown")]
    assert "RTX A6000" in result.findings[0].evidence and "Gen1 x16 of Gen4 x16" in result.findings[0].evidence
    assert result.decides and "under load" in result.decides


def test_healthy_links_are_read_and_ok() -> None:
    # siboehm/bench: LnkSta 16GT/s (ok), x16 (ok); liguodongiot/llm-action: nvidia-smi -q of an H800, Gen5 x16.
    lspci = check(DEV, captures=["lspci__siboehm-bench-1.txt"])
    assert lspci.severity.value == "ok" and [(k.state, k.expected) for k in lspci.links] == [("Gen4 x16", "Gen4 x16")]
    smi = check(DEV, captures=["smi_q__liguodongiot-llm-action-1.txt"])
    assert smi.severity.value == "ok" and [(k.name, k.state) for k in smi.links] == [("00000000:18:00.0", "Gen5 x16")]
    assert [c.detail for c in smi.coverage] == ["smi_q"]


def test_lstopo_gives_no_capability_so_it_cannot_clear_a_link() -> None:
    # open-mpi/hwloc#653: one PCIBridge line at link=31.51GB/s (Gen4 x16 now; what it can do is not said).
    result = check(DEV, captures=["lstopo__open-mpi-hwloc-653.txt"])
    assert result.severity.value == "unknown" and result.coverage[0].status.value == "partial"
    assert [link.speed for link in result.links] == ["31.51 GB/s"]
    assert result.decides and "lspci -vv" in result.decides


def test_an_fdr10_port_is_slow_and_a_lone_hdr100_port_is_not() -> None:
    # FelixFu520/README: a ConnectX-3 port at 'Rate: 40 (FDR10)'; kaust-rccl/ksl-docs: one CX-6 port at 100.
    slow = check(DEV, captures=["ibstat__felixfu520-readme-2.txt"])
    assert kinds(slow) == [("ib_port_slow", "warn")] and "mlx4_0:1 runs at 40 Gb/s (FDR10)" in slow.findings[0].evidence
    assert check(DEV, captures=["ibstat__kaust-rccl-ksl-docs-1.txt"]).findings == []


def test_p2p_refused_between_local_gpus() -> None:
    # ultralytics#12905 (NCCL 2.7 wording): 'Could not enable P2P between dev 3(=68000) and dev 2(=67000)'.
    p2p = check(DEV, nccl_logs=["nccl_log__ultralytics-ultralytics-12905.txt"])
    assert kinds(p2p) == [("p2p_disabled", "warn")] and "GPUs 3 and 2" in p2p.findings[0].evidence
    # B5paper/documents: two GPUs of one process (pid 54233) ring over NET/Socket: no P2P, no SHM, not sockets
    # between nodes.
    local = check(DEV, nccl_logs=["nccl_log__b5paper-documents-2.txt"])
    assert kinds(local) == [("p2p_disabled", "warn")] and "NET/Socket" in local.findings[0].evidence


def test_nccl_s_own_topology_shows_a_pair_that_lost_nvlinks() -> None:
    # Timez-zx/nccl-tests: NVL[20.0] one way, NVL[240.0] the other, between the same two A100s.
    degraded = check(DEV, nccl_logs=["nccl_log__timez-zx-nccl-tests-2.txt"])
    assert kinds(degraded) == [("topo_degraded", "warn")]
    assert "at 20 GB/s, the reverse at 240 GB/s" in degraded.findings[0].evidence
    # The same host's baseline: GDR disabled for an HCA on a one-node job (nNodes 1) is no finding.
    baseline = check(DEV, nccl_logs=["nccl_log__timez-zx-nccl-tests-1.txt"])
    assert baseline.findings == [] and baseline.severity.value == "ok"


def test_nccl_s_last_error_quoted_by_pytorch_is_read() -> None:
    # Peterande/D-FINE#289: DistBackendError ... invalid usage, then 'Last error:' and NCCL's text.
    result = check(DEV, nccl_logs=["nccl_log__peterande-d-fine-289.txt"])
    assert kinds(result) == [("nccl_warn", "warn")]
    assert "invalid usage: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000" in \
        result.findings[0].evidence
    assert result.transports[0].nccl_version == "2.19.3"


def test_interfaces_judged_by_what_the_job_is() -> None:
    # FelixFu520/README: 'Bootstrap : no socket interface found' is the interface's fault as well as a WARN.
    missing = check(DEV, nccl_logs=["nccl_log__felixfu520-readme-1.txt"])
    assert {k for k, _ in kinds(missing)} == {"wrong_interface", "nccl_warn"}
    assert ("wrong_interface", "crit") in kinds(missing)
    # bytedance/byteps#97: lo only, one host, no line saying how many nodes: unknown, not a fault.
    loopback = check(DEV, nccl_logs=["nccl_log__bytedance-byteps-97.txt"])
    assert loopback.verdict == "unknown" and kinds(loopback) == [("wrong_interface", "unknown")]
    # CCI-MOC/roce-testing: 169.254 bootstrap named by NCCL_SOCKET_IFNAME (a back-to-back link): a note, while the
    # test's own NCCL lines show NET/IB without GDRDMA.
    moc = check(DEV, nccl_tests=["nccl_tests__cci-moc-roce-testing-1.txt"])
    assert kinds(moc) == [("no_gdr", "warn")]
    assert any("169.254" in note and "NCCL_SOCKET_IFNAME" in note for note in moc.notes)


def test_a_pcie_box_s_busbw_is_judged_by_its_gpus_pcie_generation() -> None:
    # Anthony-Hoo.github.io: two RTX 2080 Ti (PCIe Gen3 x16) all_reduce at 4 GB/s; broadcast on the same box 11.09.
    low = check(WILD, nccl_tests=["nccl_tests__Anthony-Hoo-Anthony-Hoo.github.io-1.txt"])
    assert kinds(low) == [("busbw_low", "crit")]
    assert low.bandwidth[0].expected_busbw_gbs == 11.8 and "PCIe Gen3 x16" in (low.bandwidth[0].expected_from or "")
    fine = check(WILD, nccl_tests=["nccl_tests__Anthony-Hoo-Anthony-Hoo.github.io-3.txt"])
    assert fine.findings == [] and fine.bandwidth[0].ratio == 0.94


def test_the_held_out_labels_are_refused_once_changed(tmp_path: Path) -> None:
    # The digest check only: a copy of the split file beside a labels file that is not the frozen one.
    round_folder = DATA / "interconnect" / "round4"
    shutil.copy(next(round_folder.glob("split_*.json")), tmp_path)
    split = json.loads(next(tmp_path.glob("split_*.json")).read_text())
    (tmp_path / split["heldout_labels"]).parent.mkdir(parents=True)
    (tmp_path / split["heldout_labels"]).write_text('{"file": "x.txt", "kind": "lspci", "findings": []}\n')
    with pytest.raises(SystemExit, match="changed after it was frozen"):
        accuracy_interconnect.load_heldout(tmp_path)
