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


def scenarios() -> list[Scenario]:
    legacy_day3 = ("sm_clock", "gpu_util", "gpu_temp", "power", "clock_reasons", "xid", "gr_engine_active")
    return [
        Scenario(_day1_gpus(), _day1, DAY1, DAY1 + 2 * HOUR),
        Scenario([Gpu(node, i, uuid(10 + n, i), f"00000000:{0x19 + 0x10 * i:02X}:00.0", driver="580.65.06")
                  for n, node in enumerate(("gpu-n1", "gpu-n2")) for i in range(2)],
                 _day2, DAY2, DAY2 + 2 * HOUR, generation="4.9"),
        # H100 MIG instances have no FB series (dcgm-exporter issue 512) and GPU_UTIL reads 0 on MIG (issue 216).
        Scenario(_day3_gpus(), _day3, DAY3, DAY3 + 2 * HOUR, concepts=legacy_day3),
    ]
