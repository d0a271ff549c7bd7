"""Every threshold a verdict compares a measured value with, in one place, with the reason for its value
(the source documents' numbers where they give one). Limits on what a call may read or return are in limits.py.
"""

from __future__ import annotations

# GPU temperature: clocks come down around 85-90 C; the straggler article flags >= 90 C.
GPU_TEMP_WARN_C = 85
GPU_TEMP_CRIT_C = 90
# Memory nearly full: the next allocation spike OOMs or the allocator thrashes.
GPU_MEMORY_WARN_PCT = 95.0
# Power at the enforced cap: boost clocks cannot rise.
POWER_AT_CAP_PCT = 98.0
# "Under load": below this utilisation low clocks and a down-trained PCIe link are normal power saving.
UNDER_LOAD_PCT = 30
SM_CLOCK_LOW_PCT = 80.0
# Reasons that mean the GPU is slowed by hardware protection.
CRIT_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"})
WARN_THROTTLE = frozenset({"sw_power_cap"})

# Host.
LOAD_PER_CORE_WARN = 1.5
MEM_AVAILABLE_WARN_PCT = 10.0
MEM_AVAILABLE_CRIT_PCT = 5.0
SWAP_USED_WARN_MIB = 64.0
IOWAIT_WARN_PCT = 10.0
IOWAIT_CRIT_PCT = 30.0
CORE_SATURATED_PCT = 95.0


# Inference serving (inference_metrics). Latency targets are the caller's SLO; these defaults are common
# interactive-chat targets (TTFT p90 under 2 s, 100 ms between tokens = 10 tokens/s per stream).
INFER_TTFT_TARGET_S = 2.0
INFER_ITL_TARGET_S = 0.1
# A p90 this many times its target is critical, not a warning.
INFER_CRIT_FACTOR = 3.0
# Fewer finished requests than this in the window and a p90 is the slowest one or two: no latency verdict.
INFER_MIN_REQUESTS = 10
# KV cache this full leaves no room for the next long request: vLLM preempts, SGLang retracts.
KV_CACHE_WARN_PCT = 90.0
# Queue time at least this share of TTFT: the wait is queueing, not prefill compute.
QUEUE_SHARE_OF_TTFT = 0.5
# Below this prefix-cache hit rate, prefix caching saves little prefill (or is off).
PREFIX_HIT_LOW_PCT = 10.0

# nvidia_smi_query: utilisation the SOP calls low when it persists (ideal is > 90%), over at least this many samples
# (one reading proves nothing).
UTIL_LOW_PCT = 70.0
UTIL_MIN_SAMPLES = 5

# Stragglers (find_stragglers): a rank this much slower than the median rank (same-model GPUs differ < 5%).
STRAGGLER_WARN_PCT = 5.0
STRAGGLER_CRIT_PCT = 15.0
# A rank's median step time must differ from the others' by this many standard errors to count, over at least
# this many steps.
STRAGGLER_SIGNIFICANCE = 3.0
STRAGGLER_MIN_STEPS = 3
# Logs and traces of the same job (find_stragglers joins them per rank, triage_report tells them one story): a trace
# recorded more than this many hours outside the logs' time span is another run (log times are local and carry no
# zone: +-14 h of zone offset fit well inside it); the same rank's median step from its log and from its trace
# differing by more than this factor is another workload (profiler overhead on the traced steps stays well below 2x).
JOB_TIME_GAP_H = 48.0
JOB_STEP_RATIO = 4.0

# summarize_trace: kernels shorter than this with gaps under SMALL_GAP_US between them are launch-bound (HTA's
# consecutive_kernel_delay is the gap); a cause below MIN_CAUSE_PCT of the step is noise, left out.
SHORT_KERNEL_US = 10.0
SMALL_GAP_US = 30.0
MIN_CAUSE_PCT = 0.5
# A GPU gap whose next kernel was launched after the gap began, or less than this before (a launch takes about
# 5-10 us to reach the GPU), is host-bound: the queue ran dry and the GPU waited for the host. A kernel launched
# earlier was queued and waited on something else (another stream, an event, a CUDA graph's own order).
LAUNCH_AHEAD_US = 10.0
# Such a host-bound gap shorter than this is dispatch overhead between consecutive ops (eager PyTorch spends 10-100
# us of Python and dispatcher per op): launch-bound. A longer one is other host work (preprocessing, Python).
DISPATCH_GAP_US = 500.0
# CPU ops kept to name what the host did while the GPU idled (shorter ones are many and explain little).
LONG_OP_US = 100.0

# compare_runs: before/after. A difference counts when the two runs' steady-state steps differ beyond their
# step-to-step noise (two-sided Mann-Whitney U, p below this) AND by at least this much (a 0.5% shift over
# 10,000 steps is "significant" and still nothing anyone should act on).
COMPARE_P_VALUE = 0.05
COMPARE_MIN_CHANGE_PCT = 2.0
# A cause's time per step: changed when it moves by more than COMPARE_CAUSE_REL of the larger side and
# COMPARE_CAUSE_ABS_PCT of the baseline step; resolved when at most COMPARE_RESOLVED_FRACTION of it is left.
COMPARE_CAUSE_REL = 0.2
COMPARE_CAUSE_ABS_PCT = 2.0
COMPARE_RESOLVED_FRACTION = 0.1

# analyze_memory's verdict: cached-but-free bytes this large a share of reserved (and at least this many bytes) are
# fragmentation; an OOM demand this many times the earlier steps' peak is a transient peak; live bytes whose
# trough rises by this share of the peak across the trace are growth; devices whose peaks differ this much are
# unbalanced.
MEM_FRAGMENTED_PCT = 30.0
MEM_FRAGMENTED_MIN_BYTES = 512 * 1024 * 1024
MEM_TRANSIENT_RATIO = 1.25
MEM_GROWTH_PCT = 10.0
MEM_GROWTH_MIN_EVENTS = 40
MEM_UNBALANCED_RATIO = 1.5
MEM_UNBALANCED_MIN_BYTES = 1024 * 1024 * 1024

# diagnose_logs: an NCCL communicator of more ranks than this spans nodes (8 GPUs is the most nearly any node
# holds; a 16-GPU DGX-2 is the rare exception), for logs of an NCCL too old to print nNodes.
GPUS_PER_NODE_MAX = 8

# Nsight Systems' own expert-system rules (`nsys analyze`, 2023.4), with NVIDIA's defaults, so that a user who knows
# them recognises the findings: GPU idle gaps of at least this long (gpu_gaps), time utilisation below this share in
# this many equal chunks of the GPU span (gpu_time_util), and the small host-to-device copies cuda_memcpy_sync
# leaves out (at most this many bytes).
NSYS_GAP_MS = 500.0
NSYS_UTIL_PCT = 50.0
NSYS_UTIL_CHUNKS = 30
NSYS_SMALL_HTOD_BYTES = 64_000

# summarize_trace's one-word verdict (`bottleneck`): the GPU counts as busy, with nothing worth fixing first, at this
# share of the step or more when no cause of GPU idle reaches BOTTLENECK_CAUSE_PCT; else the largest cause is it.
BOTTLENECK_BUSY_PCT = 85.0
BOTTLENECK_CAUSE_PCT = 10.0

# check_interconnect: a run's peak busbw below this share of what the fabric should give is low (below the second
# share, critical); one run below this share of the median of its peers (same collective and ranks) is the slow
# one. nccl-tests' own rule of thumb: ~80 % of the advertised rate (stas00/ml-engineering, network/debug).
BUSBW_LOW_RATIO = 0.8
BUSBW_CRIT_RATIO = 0.5
BUSBW_PEER_RATIO = 0.8
# Usable share of a NIC's line rate as NCCL busbw (NVIDIA: ~12 GB/s per 100G, ~24 per 200G, 46-48 per 400G NIC).
NIC_EFFICIENCY = 0.96
# A multi-node run of NVSwitch-board or superchip GPUs (A100/H100/H200/H800/H20 SXM, B200, GB200, GH200) whose NICs
# nothing names: no platform of theirs is built with less than one NIC of this rate (Gb/s) per node (the smallest
# cloud A100 instances give 100 Gb/s; NVIDIA's DGX/HGX/MGX designs give each GPU 200-400 Gb/s). A busbw low against
# that floor is low on any fabric they run on; one above it is not cleared (the real fabric may give 30 times more).
PLATFORM_MIN_NIC_GBPS = 100.0
# A run whose busbw at its largest size (at least FALL_OFF_MIN_BYTES) is under this share of its own peak falls off:
# busbw rises with the size and then holds on a healthy path (Azure lists the fall-off as a congestion pattern).
FALL_OFF_RATIO = 0.5
FALL_OFF_MIN_BYTES = 16 * 1024 * 1024

# profile_cpu: the trainer is input-bound when this share of its main thread's samples waits on (or, with
# num_workers=0, runs) the DataLoader and its workers are busy at least WORKER_BUSY_SHARE; a main thread busy
# MAIN_LOOP_BUSY_SHARE of its samples outside the DataLoader is CPU-bound itself; IO when most busy worker samples
# sit in reads.
INPUT_WAIT_SHARE = 0.3
WORKER_BUSY_SHARE = 0.5
MAIN_LOOP_BUSY_SHARE = 0.8
IO_READ_SHARE = 0.5
SYNC_WAIT_SHARE = 0.3
# GIL contention: at least two threads of one process are in Python code (no wait at their leaf) in
# GIL_THREAD_BUSY_SHARE of their samples, yet the process used at most GIL_CORES_RATIO of the cores they would
# together fill (and at most GIL_MAX_CORES): they take turns on one GIL. Needs the process's CPU time over the
# recording (a live profile).
GIL_THREAD_BUSY_SHARE = 0.5
# A main thread "busy" by its leaf (Python code that called into C++) whose process used less than this many cores
# over a live recording is waiting in native code (a collective, a device sync, I/O), not computing in Python.
MAIN_LOOP_MIN_CORES = 0.3
# profile_cpu: a trainer main thread with fewer samples than this is not judged (unknown): the shares the verdicts
# compare (INPUT_WAIT_SHARE, MAIN_LOOP_BUSY_SHARE...) carry a sampling error of about +-14 % at 50 samples (2 sigma of
# a 50 % share), as wide as the gaps between those thresholds.
PROFILE_MIN_SAMPLES = 50
GIL_CORES_RATIO = 0.7
GIL_MAX_CORES = 1.3

# sample_host: a disk is saturated when requests wait IO_AWAIT_MS or more with IO_QUEUE_DEPTH or more in flight
# (%util alone is not saturation on SSD, NVMe or RAID); the CPUs are saturated at CPU_IDLE_PCT idle or less; a
# DataLoader worker at WORKER_SATURATED_PCT of a core is CPU-bound; iowait of IOWAIT_PCT with blocked tasks, and
# swapping with MemAvailable under MEM_AVAILABLE_PCT, are the other two verdicts.
IO_AWAIT_MS = 20.0
IO_QUEUE_DEPTH = 1.0
IO_BUSY_UTIL_PCT = 90.0  # with a queue and IO_BUSY_AWAIT_MS: a disk that serves one request at a time, saturated
IO_BUSY_AWAIT_MS = 10.0
# Stalled: at IO_BUSY_UTIL_PCT with a queue, the time a request spends queued by Little's law (aqu-sz / IOPS) is
# IO_STALL_MS or more, ten times IO_BUSY_AWAIT_MS and beyond a spinning disk's seek at a modest queue: few requests
# complete, so the await column (of the completed ones only) can read near 0 while the queue does not move.
IO_STALL_MS = 100.0
IOWAIT_PCT = 20.0
CPU_IDLE_PCT = 10.0
WORKER_SATURATED_PCT = 80.0
MEM_AVAILABLE_PCT = 10.0
# Periodic dips (tools/core/periodic.py): at least this many cycles in the window, and an autocorrelation at the
# period of at least this (or above the noise band of the series' length).
PERIOD_MIN_CYCLES = 3.0
PERIOD_MIN_CORRELATION = 0.3
PERIOD_MIN_PEAK_RATIO = 10.0  # the periodogram's peak over its median power
PERIOD_MIN_CYCLE_SHARE = 0.6  # stretches one period long that dip and recover, of all such stretches

# What the SMs do (gpu_activity). NVIDIA's DCGM guide: SM activity "of 0.8 or greater is necessary, but not
# sufficient, for effective use of the GPU", and below 0.5 "likely indicates ineffective GPU usage".
SM_ACTIVE_NEEDED = 0.8
SM_ACTIVE_POOR = 0.5
# "Busy" by utilization.gpu (a kernel ran this share of the time): the level at which low SM activity is the
# puzzle the agent must explain, not plain idleness.
ACTIVITY_BUSY_UTIL_PCT = 80.0
# Tensor pipes this idle while the SMs work: the math is not on tensor cores.
TENSOR_IDLE = 0.05
TENSOR_LOW = 0.3
# DRAM bandwidth this close to its peak: the kernels wait on memory.
DRAM_BOUND = 0.7
# PCIe carrying a collective's traffic (bytes/s, both ways) while NVLink carries none.
PCIE_BUSY_BYTES_PER_S = 2e9
NVLINK_IDLE_BYTES_PER_S = 1e8
# One GPU of a node this far below the node's median SM activity (absolute, and as a share of the median):
# DCGM 4.5's idea of flagging a GPU off its node's mean.
GPU_BELOW_NODE_ABS = 0.2
GPU_BELOW_NODE_SHARE = 0.7
GPU_BELOW_NODE_MIN_GPUS = 3

# sample_host on pasted captures (issue 32). Memory: MemAvailable at MEM_AVAILABLE_PCT or less is pressure only with
# a sign of reclaim in the same capture (swap traffic, kswapd at KSWAPD_BUSY_PCT of a core, swap used to
# SWAP_FULL_PCT, the CPUs' system time at RECLAIM_SYSTEM_PCT, major faults at MAJOR_FAULTS_S per second, direct
# reclaim scans): a snapshot with little free memory and none of those is a full page cache, which is healthy. PSI
# (Documentation/accounting/psi.rst): memory `full` is time in which every non-idle task stalled at once, so a few
# per cent is already lost work; `some` counts any one task waiting. CPU `some` also counts cgroup throttling and is
# high on any oversubscribed but healthy host, so it alone never makes cpu_bound (it makes the answer unknown).
KSWAPD_BUSY_PCT = 10.0
SWAP_FULL_PCT = 90.0
# Nearly nothing left (MEM_NEARLY_NONE_PCT or less available) with a large share of swap in use (SWAP_PUSHED_PCT):
# the kernel already pushed pages out to make room and has no cache left to drop, so what runs next swaps (issue 32,
# round 10: a 7 GiB node at 2.8 % available with half its swap used, searches taking seconds). With no swap at all the
# same few per cent means the next allocation meets the OOM killer (round 11: a 2 GiB server at 4.2 % available).
MEM_NEARLY_NONE_PCT = 5.0
SWAP_PUSHED_PCT = 25.0
# /proc/meminfo's SwapCached at SWAP_CACHED_PCT of memory or more: that many pages went out to swap and were read back
# in (a page in the swap cache has a copy in swap); beside little available memory, the swapping has happened, not a
# full page cache (a healthy host's SwapCached is zero or a few MB).
SWAP_CACHED_PCT = 1.0
RECLAIM_SYSTEM_PCT = 50.0
MAJOR_FAULTS_S = 100.0
DIRECT_SCANS_S = 1000.0
# An iostat report whose totals over its rates span this long averages since boot (no one samples hourly with
# iostat; a report pasted into round 10 spans 9.7 days).
IOSTAT_SINCE_BOOT_SPAN_S = 3600.0
# A capture of several memory readings (free -s, a logged `free -m`, top -b frames, a top -p log of one process)
# shows reclaim at work where the page cache at the lowest reading is at most MEM_RUNNING_OUT_RATIO of its largest
# before it (the kernel evicts cache as memory runs out), and memory still running out where available memory has
# fallen to that share of what it was; either, with MEM_AVAILABLE_PCT or less left, is pressure.
MEM_RUNNING_OUT_RATIO = 0.5
PSI_MEMORY_FULL_PCT = 5.0
PSI_MEMORY_SOME_PCT = 20.0
PSI_IO_FULL_PCT = 10.0
PSI_IO_SOME_PCT = 40.0
PSI_CPU_SOME_PCT = 50.0
# A single-threaded main loop: at most MAIN_LOOP_MAX_HOT_CORES cores (and at most half of those listed) at
# CPU_IDLE_PCT idle or less while the others' median idle is at least MAIN_LOOP_REST_IDLE_PCT; or one process or
# thread at MAIN_LOOP_PROCESS_PCT of a core (no more than MAIN_LOOP_PROCESS_MAX_PCT: more is several threads) on a
# host at least HOST_MOSTLY_IDLE_PCT idle. Runnable tasks confined to few cores: a load average of CONFINED_LOAD or
# more and CONFINED_RUNNING tasks running on a host CONFINED_IDLE_PCT idle with no iowait.
MAIN_LOOP_MAX_HOT_CORES = 2
# The others need only have headroom, as HOST_MOSTLY_IDLE_PCT asks of the host for one busy process: a core pinned
# while the rest are half idle or more is work waiting on one thread (issue 32, round 13: a validator's CPU 0 at 99.7 %
# with the others 63 % idle; it was 70 before, and lowering it changed no other development verdict).
MAIN_LOOP_REST_IDLE_PCT = 50.0
MAIN_LOOP_PROCESS_PCT = 90.0
MAIN_LOOP_PROCESS_MAX_PCT = 110.0
HOST_MOSTLY_IDLE_PCT = 50.0
CONFINED_LOAD = 8.0
CONFINED_RUNNING = 3
CONFINED_IDLE_PCT = 90.0
# numastat: allocations that missed their node at this share of the hits are memory placed off the job's socket.
NUMA_MISS_SHARE = 0.1
CONFINED_MAX_IOWAIT_PCT = 5.0

# check_interconnect on pasted node outputs (issue 32). NCCL's topology dump gives each GPU pair's NVLink bandwidth
# per direction: a pair below this share of the node's fastest has lost links (a healthy board is uniform, and a
# bridged pair is the same both ways). A PCIe-only box's busbw is judged against the usable one-way rate of the
# GPUs' own PCIe generation at x16 (PCIE_USABLE_SHARE of the raw rate: 128b/130b coding and TLP overhead leave
# ~12 GB/s of Gen3's 15.75, what nccl-tests reaches between two Gen3 cards), and only on runs that reach
# PCIE_JUDGE_MIN_BYTES (small messages are latency-bound at any link rate).
NVLINK_PAIR_RATIO = 0.5
PCIE_USABLE_SHARE = 0.75
PCIE_JUDGE_MIN_BYTES = 64 * 1024 * 1024
# A GPU's PCIe link below its maximum speed is power saving when idle (NVIDIA GPUs drop to Gen1): it counts as
# degraded only under load, GPU utilisation of UNDER_LOAD_PCT or more (nvidia-smi -q) or PCIe traffic of at least
# PCIE_BUSY_KBS (its Tx/Rx throughput).
PCIE_BUSY_KBS = 1_000_000

# analyze_kernels: NVIDIA's own bottleneck rule (SOLBottleneck in Nsight Compute's SpeedOfLight section): a unit at
# 60 % of its peak or more bounds the kernel; both below 60 % is latency (too little parallelism to hide it); within
# 10 points of each other at >= 60 % the two are balanced (shared/notes/ncu_format.md, section 6).
KERNEL_BOUND_PCT = 60.0
KERNEL_BALANCED_GAP_PCT = 10.0
# A kernel this close to either line is borderline: either neighbouring verdict is defensible.
KERNEL_BORDERLINE_PCT = 3.0
KERNEL_BORDERLINE_GAP_PCT = 2.0
# Fewer waves than this per SM: the grid does not fill the GPU once (NVIDIA's Small Grid rule).
KERNEL_SMALL_GRID_WAVES = 1.0
# Achieved occupancy below this is low enough to name as a latency cause (half the warps an SM can hold).
KERNEL_LOW_OCCUPANCY_PCT = 50.0
# A memory-bound kernel is DRAM-bound when DRAM is within this many points of the busiest memory unit; otherwise a
# cache level (L1/TEX, shared memory, L2) is the unit at its peak (95 % Memory with 1 % DRAM is L1-bound).
KERNEL_DRAM_NEAR_PCT = 10.0
# Latency-bound kernels holding at least this share of the profiled GPU time make the answer a warning.
KERNEL_LATENCY_WARN_SHARE = 0.5
# With a trace beside the ncu results: when the profiled kernels hold less than this share of the trace's kernel
# time, most of the GPU's work was not looked at, and an answer of ok would speak for the minority: unknown, naming
# the ncu command for the kernels that hold the rest.
KERNEL_TRACE_COVERED_SHARE = 0.5
# summarize_trace: a busy GPU whose kernel time is at least this share compute kernels (not copies, memsets or
# communication) is held by its kernels: the next step is Nsight Compute on the top ones.
TRACE_NCU_COMPUTE_SHARE = 0.5

# telemetry_history (dcgm-exporter history from Prometheus). A busy GPU's SM clock this share below its own usual
# level (the 90th percentile of its busy samples) or below its peers' median is throttled: boost clocks of one model
# differ by a few per cent at most, a thermal or power slowdown takes 15-30 %. The change must last this many samples
# in a row (a single low sample is a DVFS step). Busy: utilisation of UNDER_LOAD_PCT or more.
TELEMETRY_CLOCK_DROP_SHARE = 0.1
TELEMETRY_MIN_RUN_SAMPLES = 3
# Held but idle: a GPU the job holds (job or pod label, or on the job's nodes) below this utilisation (graphics engine
# activity on MIG, in %) for at least this long. Run:ai counts whole 30 s windows of zero; ten minutes of them is no
# pause between steps or checkpoint write.
TELEMETRY_IDLE_PCT = 1.0
TELEMETRY_HELD_IDLE_MIN_S = 600.0
# Below its peers: a GPU (or a node, when most of its GPUs are) whose median utilisation or power sits this share
# below the median of the GPUs in the selection, with at least this many GPUs to compare with (the "fleet").
TELEMETRY_BELOW_PEERS_SHARE = 0.25
TELEMETRY_MIN_PEERS = 4
# A series whose last sample is this many steps (and at least this many seconds) before the window's end while others
# go on has stopped: the exporter lost the GPU (fallen off the bus) or the node.
TELEMETRY_SILENT_STEPS = 4
TELEMETRY_SILENT_MIN_S = 120.0
# When the job slowed (step_change, from the job's step logs): the first logged step this share slower than the median
# of up to TELEMETRY_STEP_BASELINE_LINES steps before it, with the median of it and the next
# TELEMETRY_STEP_RISE_MIN_LINES - 1 steps as slow too (one slow step is a checkpoint or a GC pause, not a change). The
# share is find_stragglers' crit line (STRAGGLER_CRIT_PCT): a steady job's steps differ by a few per cent.
TELEMETRY_STEP_RISE_SHARE = 0.15
TELEMETRY_STEP_RISE_MIN_LINES = 5
TELEMETRY_STEP_BASELINE_LINES = 20
# Which GPU series changed with it: a change beginning within TELEMETRY_STEP_CHANGE_WINDOW_S either side of the slow
# step (dcgm-exporter samples every 30 s and a log line closes a step that may be many seconds long), against the
# series' level over the TELEMETRY_STEP_BASELINE_S before that. A change is TELEMETRY_MIN_RUN_SAMPLES samples in a row
# past: the clock's TELEMETRY_CLOCK_DROP_SHARE; TELEMETRY_SERIES_CHANGE_SHARE of the earlier level for utilisation,
# power and NVLink / PCIe throughput (they wobble 5-10 % from sample to sample under a steady load); a temperature
# TELEMETRY_TEMP_CHANGE_C away (sample to sample 1-3 C); a slowing clock-event reason newly set.
TELEMETRY_STEP_CHANGE_WINDOW_S = 300.0
TELEMETRY_STEP_BASELINE_S = 600.0
TELEMETRY_SERIES_CHANGE_SHARE = 0.2
TELEMETRY_TEMP_CHANGE_C = 8.0

# fp16 overflow skips (diagnose_logs' overflow_skip): a dynamic loss scaler starts high (DeepSpeed 2^32, Apex and
# Megatron 2^16) and halves at each overflow until the gradients fit. Skips are a problem once the scale has fallen
# below FP16_LOSS_SCALE_LOW (gradients overflow even scaled down that far: NaN/inf in the forward or backward) or they
# keep coming: more than FP16_OVERFLOW_SKIPS_NORMAL in a log. A scaler finding its scale skips a handful of steps; the
# development labels put one skip from 2^32 as healthy and six or eight in a row from 2^32 as worth a warning
# (tests/data/logs/wild nan_inf__cogvideo-233, nan_inf__deepspeed-386), which the count follows.
FP16_LOSS_SCALE_LOW = 128.0
FP16_OVERFLOW_SKIPS_NORMAL = 4
