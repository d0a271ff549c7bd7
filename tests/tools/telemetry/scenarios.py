"""The GPU histories the telemetry tests assert on, each on its own day of one TSDB (so one Prometheus serves all).

Day 1 (2026-01-10 02:00-04:00Z, legacy names, `Hostname`), 4 nodes x 4 H100, Slurm job 4242 (hpc_job) on all but
node-a GPU 3, which job 4343 holds:
- node-b GPU 2 throttles thermally from 03:10:00: SM clock 1980 -> 1410 MHz, 67 -> 89 C, reasons 0 -> 0x60
  (sw_thermal + hw_thermal), power 690 -> 520 W;
- node-c GPU 1 raises XID 79 at 03:25:00 and then falls silent (no sample of any metric after 03:25:30);
- node-a GPU 3 (job 4343) computes until 02:40:00, then sits at 0 % holding 30 GiB;
- node-d (all 4 GPUs) runs at 55 % and 350 W from 03:00:00 while the others run at 97 %.
Day 2 (2026-01-11 02:00-04:00Z, the 4.9 names and units, `hostname`): gpu-n2 GPU 1 at its power cap from 03:00:00
(reasons 0x4, SM clock 1.98 -> 1.50 GHz).
Day 3 (2026-01-12 02:00-04:00Z, MIG on one H100, the label sets of dcgm-exporter issue 512): instances 7 and 9 held
by pods, 8 free; instance 9's graphics engine idles from 02:30:00.
Day 4 (2026-01-13 02:00-04:00Z, legacy names), 2 nodes x 4 GPUs: hw-n2 GPU 3 has a double-bit ECC error at 02:50:00
(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL 0 -> 1, one uncorrectable remapped row) and another at 03:20:00 whose row remap fails
(DBE 1 -> 2, DCGM_FI_DEV_ROW_REMAP_FAILURE 0 -> 1); hw-n1 GPU 0's PCIe replay counter climbs 100 -> 150 from 03:05:00
(5 a sample for ten samples). Every other counter stays where it is.
Day 5 (2026-01-14 02:00-04:00Z, legacy names with NVLink and PCIe throughput), 2 nodes x 2 GPUs, one job: sc-n2
GPU 1 slows down at 02:40:00 (hw_slowdown: SM clock 1980 -> 1500 MHz, power 690 -> 470 W); the job's steps go from
0.8 to 1.2 s a minute later (the test writes the step logs), and from then every GPU moves a third less over NVLink.
"""

from __future__ import annotations

from tests.tools.telemetry.history import Gpu, Scenario

DAY1 = 1768010400  # 2026-01-10T02:00:00Z
DAY2 = DAY1 + 86400
DAY3 = DAY2 + 86400
HOUR = 3600


def uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:02x}{gpu:02x}5b59-2c1e-1e63-0068-9178c4298abd"


def _day1_gpus() -> list[Gpu]:
    gpus = []
    for n, node in enumerate(("node-a", "node-b", "node-c", "node-d")):
        for i in range(4):
            job = "4343" if (node, i) == ("node-a", 3) else "4242"
            gpus.append(Gpu(node, i, uuid(n, i), f"00000000:{0x19 + 0x10 * i:02X}:00.0", hpc_job=job))
    return gpus


THROTTLE_AT = DAY1 + 70 * 60  # 03:10:00
XID_AT = DAY1 + 85 * 60  # 03:25:00
IDLE_AT = DAY1 + 40 * 60  # 02:40:00
SLOW_AT = DAY1 + HOUR  # 03:00:00


def _day1(gpu: Gpu, concept: str, t: int) -> float | None:
    wobble = (t // 30 + gpu.index) % 3  # small, deterministic sample-to-sample variation
    throttled = (gpu.node, gpu.index) == ("node-b", 2) and t >= THROTTLE_AT
    idle = (gpu.node, gpu.index) == ("node-a", 3) and t >= IDLE_AT
    slow = gpu.node == "node-d" and t >= SLOW_AT
    if (gpu.node, gpu.index) == ("node-c", 1):
        if t > XID_AT + 30:
            return None  # fell off the bus: the exporter has nothing more for this GPU
        if concept == "xid":
            return 79 if t >= XID_AT else 0
    if concept == "sm_clock":
        return 1410 if throttled else 1755 if idle else 1980
    if concept == "gpu_util":
        return 0 if idle else 55 + wobble if slow else 96 + wobble
    if concept == "gpu_temp":
        return 89 if throttled else 41 if idle else 67 - wobble
    if concept == "power":
        return 520 if throttled else 95 if idle else 350 if slow else 690 - 5 * wobble
    if concept == "fb_used":
        return 30720 if idle else 61000
    if concept == "clock_reasons":
        return 0x60 if throttled else 0x1 if idle else 0
    if concept == "xid":
        return 0
    if concept == "pcie_replay":
        return 12
    raise AssertionError(concept)


POWER_CAP_AT = DAY2 + HOUR  # 03:00:00


def _day2(gpu: Gpu, concept: str, t: int) -> float | None:
    capped = (gpu.node, gpu.index) == ("gpu-n2", 1) and t >= POWER_CAP_AT
    return {"sm_clock": 1500 if capped else 1980, "gpu_util": 98, "gpu_temp": 71, "power": 700 if capped else 640,
            "fb_used": 70000, "clock_reasons": 0x4 if capped else 0, "xid": 0, "pcie_replay": 0}[concept]


MIG_IDLE_AT = DAY3 + 30 * 60  # 02:30:00
MIG_UUID = "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"


def _day3_gpus() -> list[Gpu]:
    pods = {"7": ("kserve-container", "model-playground-stg",
                  "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl"),
            "9": ("kserve-container", "model-playground-stg", "tts-predictor-00011-deployment-5554f75554-8j8pl")}
    return [Gpu("gsrh100-074", 0, MIG_UUID, "00000000:1A:00.0", mig=("1g.10gb", gi), pod=pods.get(gi),
                driver="535.129.03") for gi in ("7", "8", "9")]


def _day3(gpu: Gpu, concept: str, t: int) -> float | None:
    instance = gpu.mig[1] if gpu.mig else ""
    if concept == "gr_engine_active":
        return 0.0 if instance == "8" or (instance == "9" and t >= MIG_IDLE_AT) else 0.62
    return {"sm_clock": 1980, "gpu_util": 0, "gpu_temp": 52, "power": 310, "clock_reasons": 0, "xid": 0}[concept]


DAY4 = DAY3 + 86400
DBE_AT = DAY4 + 50 * 60  # 02:50:00
REMAP_FAILED_AT = DAY4 + 80 * 60  # 03:20:00
REPLAY_AT = DAY4 + 65 * 60  # 03:05:00


def _day4(gpu: Gpu, concept: str, t: int) -> float | None:
    broken = (gpu.node, gpu.index) == ("hw-n2", 3)
    if concept == "ecc_dbe":
        return (2 if t >= REMAP_FAILED_AT else 1 if t >= DBE_AT else 0) if broken else 0
    if concept == "remapped_uncorrectable":
        return 1 if broken and t >= DBE_AT else 0
    if concept == "row_remap_failure":
        return 1 if broken and t >= REMAP_FAILED_AT else 0
    if concept == "pcie_replay":
        if (gpu.node, gpu.index) != ("hw-n1", 0):
            return 7
        return 100 + 5 * min(10, (t - REPLAY_AT) // 30 + 1) if t >= REPLAY_AT else 100
    return {"sm_clock": 1980, "gpu_util": 97, "gpu_temp": 66, "power": 680, "fb_used": 61000, "clock_reasons": 0,
            "xid": 0}[concept]


DAY5 = DAY4 + 86400
GPU_SLOW_AT = DAY5 + 40 * 60  # 02:40:00: sc-n2 GPU 1's clocks drop
STEPS_SLOW_AT = GPU_SLOW_AT + 60  # the job's steps slow a minute later
STEP_MS_BEFORE, STEP_MS_AFTER = 800.0, 1200.0


def _day5(gpu: Gpu, concept: str, t: int) -> float | None:
    slow = (gpu.node, gpu.index) == ("sc-n2", 1) and t >= GPU_SLOW_AT
    wobble = (t // 30 + gpu.index) % 3
    if concept == "nvlink_total":  # MB/s, a rate (the exporter calls it a counter)
        return (120_000 if t >= STEPS_SLOW_AT else 180_000) + 1000 * wobble
    return {"sm_clock": 1500 if slow else 1980, "gpu_util": 96 + wobble, "gpu_temp": 66 - wobble,
            "power": 470 if slow else 690 - 5 * wobble, "fb_used": 61000, "clock_reasons": 0x8 if slow else 0,
            "xid": 0, "pcie_tx": 2.1e9 + 1e7 * wobble}[concept]


def step_log_lines(start: int, end: int) -> list[tuple[float, int, float]]:
    """(unix time, step, step ms) of a line every 10 steps, as the job logs them: a block of ten steps started at or
    after STEPS_SLOW_AT takes STEP_MS_AFTER each."""
    lines = []
    t, step = float(start), 0
    while t < end:
        ms = STEP_MS_AFTER if t >= STEPS_SLOW_AT else STEP_MS_BEFORE
        t += 10 * ms / 1000
        step += 10
        lines.append((t, step, ms))
    return lines


def scenarios() -> list[Scenario]:
    legacy_day3 = ("sm_clock", "gpu_util", "gpu_temp", "power", "clock_reasons", "xid", "gr_engine_active")
    return [
        Scenario(_day1_gpus(), _day1, DAY1, DAY1 + 2 * HOUR),
        Scenario([Gpu(node, i, uuid(10 + n, i), f"00000000:{0x19 + 0x10 * i:02X}:00.0", driver="580.65.06")
                  for n, node in enumerate(("gpu-n1", "gpu-n2")) for i in range(2)],
                 _day2, DAY2, DAY2 + 2 * HOUR, generation="4.9"),
        # H100 MIG instances have no FB series (dcgm-exporter issue 512) and GPU_UTIL reads 0 on MIG (issue 216).
        Scenario(_day3_gpus(), _day3, DAY3, DAY3 + 2 * HOUR, concepts=legacy_day3),
        Scenario([Gpu(node, i, uuid(20 + n, i), f"00000000:{0x19 + 0x10 * i:02X}:00.0")
                  for n, node in enumerate(("hw-n1", "hw-n2")) for i in range(4)], _day4, DAY4, DAY4 + 2 * HOUR,
                 concepts=("sm_clock", "gpu_util", "gpu_temp", "power", "fb_used", "clock_reasons", "xid",
                           "pcie_replay", "ecc_dbe", "remapped_uncorrectable", "row_remap_failure")),
        Scenario([Gpu(node, i, uuid(30 + n, i), f"00000000:{0x19 + 0x10 * i:02X}:00.0", hpc_job="5151")
                  for n, node in enumerate(("sc-n1", "sc-n2")) for i in range(2)], _day5, DAY5, DAY5 + 2 * HOUR,
                 concepts=("sm_clock", "gpu_util", "gpu_temp", "power", "fb_used", "clock_reasons", "xid",
                           "nvlink_total", "pcie_tx")),
    ]
