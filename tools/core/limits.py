"""Every limit of the project, declared once.

Input models cite these in their `Field(ge=, le=)` bounds and the server and CLI use them as
defaults, so no bound is written twice.
"""

from __future__ import annotations

from typing import Final

# Response size: the rendered markdown of one call. Rows beyond it are cut, and the cut is
# reported. The structured JSON is held to JSON_BUDGET_FACTOR times the same figure.
DEFAULT_MAX_BYTES: Final = 8 * 1024
MIN_MAX_BYTES: Final = 1024
MAX_MAX_BYTES: Final = 256 * 1024
JSON_BUDGET_FACTOR: Final = 3

# Wall clock of one tool call, children included.
DEFAULT_CALL_TIMEOUT_S: Final = 60.0
PROGRESS_INTERVAL_S: Final = 0.5  # a long call's progress notifications: at most two a second
MIN_CALL_TIMEOUT_S: Final = 1.0
MAX_CALL_TIMEOUT_S: Final = 600.0
# A call stopped at its deadline gets this long to unwind (kill its children) before the answer goes out without it.
CALL_STOP_GRACE_S: Final = 2.0
# Calls left blocked in a stalled file system before the server refuses every new call (each holds a thread).
STALLED_CALLS_MAX: Final = 8

# Output read from one external program; the rest is discarded and reported as cut.
MAX_PROGRAM_OUTPUT_BYTES: Final = 4 * 1024 * 1024
# A child still running at its limit gets SIGTERM, this long to exit, then SIGKILL; then this long to be reaped.
CHILD_TERM_GRACE_S: Final = 1.0
CHILD_REAP_TIMEOUT_S: Final = 5.0

# health_check: one bounded snapshot.
HEALTH_DEFAULT_SAMPLE_S: Final = 1.0
HEALTH_MIN_SAMPLE_S: Final = 0.1
HEALTH_MAX_SAMPLE_S: Final = 2.0
HEALTH_MAX_TOTAL_S: Final = 3.0
HEALTH_DEFAULT_TOP_PROCESSES: Final = 10
HEALTH_MAX_TOP_PROCESSES: Final = 50
HEALTH_MAX_JOB_PIDS: Final = 4096
HEALTH_MAX_KERNEL_LOG_LINES: Final = 20
CMDLINE_MAX_CHARS: Final = 120

# nvidia_smi_query: the safe replacement for `watch` and `-l`.
SMI_MAX_SAMPLES: Final = 60
SMI_MIN_INTERVAL_S: Final = 0.2
SMI_MAX_INTERVAL_S: Final = 10.0
SMI_MAX_SAMPLING_S: Final = 60.0
SMI_MAX_FIELDS: Final = 40
SMI_MAX_GPU_INDEX: Final = 1023
SMI_MAX_CSV_BYTES: Final = 16 * 1024 * 1024
# Rows a result carries (the last ones): a -l capture of a day holds 100k, and every returned string is redacted and
# rendered; the per-GPU summary and the periodic search read them all.
SMI_MAX_ROWS_RETURNED: Final = 512

# Paths given to any tool.
MAX_PATH_CHARS: Final = 4096

# Logs (grep_logs, diagnose_logs).
LOG_MAX_FILES: Final = 512
LOG_MAX_PATTERNS: Final = 64
LOG_MAX_PATTERN_CHARS: Final = 512
LOG_CHUNK_BYTES: Final = 4 * 1024 * 1024
# From this much log text on (and two files on local disks), diagnose_logs scans files in this thread and one spawned
# process taking turns: Python's work on each block (counting its lines, reading the matched lines) holds the GIL, so
# two threads reach only ~1.3x of one; a process costs about half a second of one core to start (imports, the
# rules), repaid after some 150 MiB of a second core's scanning. More processes only contend on two cores.
LOG_PARALLEL_BYTES: Final = 256 * 1024 * 1024
LOG_SCAN_PROCESSES: Final = 2
# Of a diagnose_logs call's time, the share its reading may take: the rest groups what was read, runs the learned
# fallback and renders, so a log too large for the deadline answers with what its read part holds (said as a partial
# read) instead of failing with nothing.
LOG_READ_SHARE: Final = 0.5  # a dense log's grouping and facts take up to ~70 % of its reading time
# grep_logs' share: what it does after reading (folding the kept matches, rendering) is small.
GREP_READ_SHARE: Final = 0.85
# Matched lines between two looks at the clock within one block (grep_logs, diagnose_logs): a block of a log that
# repeats a traceback holds some 40k matched lines, seconds of work for diagnose_logs.
LOG_CLOCK_EVERY_MATCHES: Final = 256
# Distinct (line, rules) pairs whose classification is kept while one file is scanned: a log that repeats the same
# failure (a traceback every step, a warning per rank) classifies each distinct line once.
LOG_CLASSIFIED_LINES_KEPT: Final = 4096
# diagnose_logs: lines of one finding read for where it was raised, until one names a location.
LOG_SITE_LINES: Final = 8
# diagnose_logs: lines above a failure that names no step read back for the last step the training printed (a
# traceback of a hundred frames and the warnings above it fit).
PROGRESS_LOOKBACK_LINES: Final = 300
# Distinct line texts a scan keeps one copy of (the matched lines and their context): the same log keeps each line
# of a repeated traceback once.
LOG_SAME_LINES_KEPT: Final = 4096
LOG_MAX_LINE_CHARS: Final = 400
LOG_MAX_CONTEXT: Final = 5
LOG_DEFAULT_MATCHES: Final = 100
LOG_MAX_MATCHES: Final = 1000
# Distinct folded lines kept while scanning, as a multiple of the matches asked for (memory bound).
LOG_GROUPS_FACTOR: Final = 4
LOG_SNIFF_BYTES: Final = 8192

# Profiler traces (summarize_trace).
TRACE_MAX_FILES: Final = 4096
# Characters read and decoded at a time: 1 Mi is as fast as 4 Mi and a quarter of the transient memory (the read
# text, the batch slice and its decoded events are all alive at once).
TRACE_READ_CHARS: Final = 1 * 1024 * 1024
# The most bytes of a trace decoded in one call (a few hundred events): under the 128 KiB from which the CLI maps each
# allocation afresh (mcp_server/process.py), as the copy decoded is made per batch.
TRACE_BATCH_BYTES: Final = 120 * 1024
# Events sorted into the summary's columns at a time (numpy over a chunk's fields): enough that numpy's cost per
# call is spread thin, few enough that a chunk's columns stay under the same 128 KiB (8 bytes an event each).
TRACE_COLLECT_EVENTS: Final = 8192
# nsys stats CSV output is read whole: a summary table is kilobytes; anything this large is not one.
NSYS_STATS_MAX_BYTES: Final = 64 * 1024 * 1024
# A metadata value (anything but traceEvents) larger than this is refused rather than held.
TRACE_MAX_METADATA_CHARS: Final = 64 * 1024 * 1024
TRACE_TOP_KERNELS: Final = 10
TRACE_MAX_RANK_ROWS: Final = 16

# Stacks (dump_stacks).
STACK_DEFAULT_PROCESSES: Final = 64
STACK_MAX_PROCESSES: Final = 1024
STACK_DEFAULT_TIMEOUT_S: Final = 10.0
STACK_MIN_TIMEOUT_S: Final = 0.5
STACK_MAX_TIMEOUT_S: Final = 60.0
# py-spy dumps running at once (each pauses its target for a few milliseconds).
STACK_PARALLEL_DUMPS: Final = 8
STACK_MAX_FILES: Final = 1024
STACK_MAX_FILE_BYTES: Final = 4 * 1024 * 1024
STACK_MAX_MATCH_CHARS: Final = 256
STACK_FRAMES_SHOWN: Final = 12
# Per-rank inputs read whole that get a coverage entry of their own (dump_stacks, analyze_flight_recorder); past it
# they are counted in one entry, so that 1024 ranks' files do not add 100 KB of "read" to the answer. Inputs not
# read whole are always listed one by one.
HANG_COVERAGE_READ_LISTED: Final = 64

# Multi-node fan-out (tools/cluster/nodes.py): one collector per node through Slurm or SSH.
NODES_MAX: Final = 1024
NODES_MAX_HOST_CHARS: Final = 253
# Time a collector gets on its node; the fan-out waits this plus NODES_FANOUT_MARGIN_S for the launcher.
NODES_DEFAULT_TIMEOUT_S: Final = 20.0
NODES_MIN_TIMEOUT_S: Final = 2.0
NODES_MAX_TIMEOUT_S: Final = 120.0
NODES_FANOUT_MARGIN_S: Final = 3.0
# One node's collector output: its JSON document is held to JSON_BUDGET_FACTOR x MAX_MAX_BYTES (768 KiB); a larger
# one is cut and becomes that node's error, not the call's. All nodes' output together is capped too.
NODES_MAX_OUTPUT_BYTES_PER_NODE: Final = 1024 * 1024
NODES_MAX_OUTPUT_BYTES: Final = 64 * 1024 * 1024
# SSH connections open at once.
NODES_SSH_PARALLEL: Final = 32
NODES_SSH_CONNECT_TIMEOUT_S: Final = 5
# Unhealthy nodes listed one per row in a job-level health check; the healthy rest is one distribution row.
NODES_MAX_ROWS: Final = 16

# Flight-recorder dumps (analyze_flight_recorder).
FR_MAX_FILES: Final = 4096
FR_MAX_FILE_BYTES: Final = 256 * 1024 * 1024
# Pickles up to this size are read by Python's unpickler (about 3.5 MB/s on 2 cores), whose memo cannot be made to
# allocate; larger ones by C's (tools/core/unpickle.py).
PICKLE_PURE_MAX_BYTES: Final = 32 * 1024 * 1024
# Larger pickles are read by C's unpickler in a child process held to this much memory per byte of pickle (a real
# allocator snapshot's objects take about 10x its bytes), plus a floor: a crafted memo index then fails there.
PICKLE_CHILD_BYTES_PER_BYTE: Final = 16
PICKLE_CHILD_MEMORY_FLOOR: Final = 1024 * 1024 * 1024
FR_MAX_SUSPECTS: Final = 256
FR_STACK_FRAMES: Final = 8
# Above this many bytes of dumps, worker processes (at most FR_MAX_WORKERS, one per CPU) read them in parallel.
FR_PARALLEL_BYTES: Final = 32 * 1024 * 1024
FR_MAX_WORKERS: Final = 4

# Stragglers (find_stragglers).
STRAGGLER_MAX_TRACE_PATHS: Final = 64
STRAGGLER_MAX_LOG_FILES: Final = 4096  # one log per rank of a large job
STRAGGLER_PARALLEL_BYTES: Final = 64 * 1024 * 1024  # above this much log text, worker processes read it
STRAGGLER_MAX_WORKERS: Final = 4
# Of each log, this much of its start and of its end is read for the job's identity (the world size trainers print
# at start-up, the time span); a thousand ranks' logs cost a few MB more read.
STRAGGLER_IDENTITY_BYTES: Final = 4 * 1024

# compare_runs: before/after.
COMPARE_MIN_STEPS: Final = 3  # fewer steady-state steps on a side: no test is made
COMPARE_EXACT_MAX_STEPS: Final = 60  # up to this many steps a side (and no ties), the exact U distribution
COMPARE_MAX_WARMUP_STEPS: Final = 50
COMPARE_TOP_KERNELS: Final = 10
COMPARE_MAX_LOG_FILES: Final = 4096
COMPARE_MAX_SIDE_INPUTS: Final = 64  # paths, globs or folders a side, as the other tools' path lists
COMPARE_SNIFF_BYTES: Final = 4096

# triage_plan.
PLAN_MAX_SYMPTOM_CHARS: Final = 2000

# GPU memory (analyze_memory): allocator snapshots, memory_summary() text, memory_stats() JSON, OOM logs.
MEM_MAX_FILE_BYTES: Final = 512 * 1024 * 1024  # a snapshot with max_entries=100000 and stacks is ~100-300 MiB
MEM_MAX_TEXT_BYTES: Final = 16 * 1024 * 1024  # memory_stats() JSON is a few KiB; logs go through the log reader
MEM_MAX_SEGMENTS: Final = 200_000
MEM_MAX_BLOCKS: Final = 2_000_000
MEM_MAX_TRACE_ENTRIES: Final = 5_000_000
MEM_FRAMES_READ: Final = 64  # frames looked at per block or trace entry (innermost first)
MEM_DEFAULT_SITES: Final = 10
MEM_MAX_SITES: Final = 50
MEM_MAX_OOM_LINES: Final = 1000

# inference_metrics: a vLLM / SGLang /metrics page, from a file or scraped over HTTP.
INFER_MAX_BYTES: Final = 16 * 1024 * 1024  # a V1 server with many engines and LoRAs is ~1 MB
INFER_SCRAPE_TIMEOUT_S: Final = 10.0
INFER_MIN_INTERVAL_S: Final = 1.0
INFER_MAX_INTERVAL_S: Final = 60.0
INFER_MAX_ALLOWED_HOSTS: Final = 16
INFER_MIN_TARGET_S: Final = 0.001
INFER_MAX_TARGET_S: Final = 3600.0

# diagnose_compile: findings listed (the tables keep every break and recompile).
COMPILE_MAX_FINDINGS: Final = 24

# check_interconnect: saved nccl-tests outputs and node captures are read whole (they are KB; a bigger one is not
# such an output), NCCL logs through the log reader (any size, one pass).
NET_MAX_CAPTURE_BYTES: Final = 8 * 1024 * 1024
NET_SNIFF_BYTES: Final = 200_000  # the head that tells a file given as `files` its kind (as much as kind_of reads)
NET_MAX_FILES: Final = 1024
NET_MAX_FINDINGS: Final = 40
NET_MAX_WARN_KINDS: Final = 8  # distinct NCCL WARN messages listed
NET_LIVE_TIMEOUT_S: Final = 20.0  # the live captures of one node, run together

# profile_cpu: py-spy record of the job's processes, bounded in time, rate and what is read back.
CPU_MIN_DURATION_S: Final = 1.0
CPU_MAX_DURATION_S: Final = 30.0
CPU_DEFAULT_DURATION_S: Final = 5.0
CPU_MAX_RATE_HZ: Final = 200
CPU_DEFAULT_RATE_HZ: Final = 100
CPU_MAX_PROCESSES: Final = 16  # recorded at once (each with its subprocesses)
CPU_STOP_GRACE_S: Final = 5.0  # past its duration py-spy gets SIGINT (it writes its file then), then SIGKILL
CPU_MAX_STACKS: Final = 200_000  # distinct stacks read from one record
CPU_MAX_FILE_BYTES: Final = 256 * 1024 * 1024
CPU_TOP_FUNCTIONS: Final = 8

# sample_host: a live sample of this host, bounded; saved captures read whole up to a size.
HOST_MIN_DURATION_S: Final = 1.0
HOST_MAX_DURATION_S: Final = 60.0
HOST_DEFAULT_DURATION_S: Final = 5.0
HOST_MAX_CAPTURE_BYTES: Final = 16 * 1024 * 1024
HOST_MAX_PROCESSES: Final = 256
HOST_SAMPLE_INTERVAL_S: Final = 0.5  # readings during a live sample, for its series (periodic dips)

# gpu_activity: live GPM samples, saved pages and captures.
ACTIVITY_DEFAULT_INTERVAL_S: Final = 1.0
ACTIVITY_MIN_INTERVAL_S: Final = 0.1
ACTIVITY_MAX_INTERVAL_S: Final = 10.0
ACTIVITY_DEFAULT_SAMPLES: Final = 3
ACTIVITY_MAX_SAMPLES: Final = 30
ACTIVITY_MAX_FILES: Final = 64
ACTIVITY_MAX_FILE_BYTES: Final = 16 * 1024 * 1024

# analyze_kernels: Nsight Compute reports, CSV exports and pasted text. A text or CSV export of a few hundred
# launches is a few MiB; a report is exported by ncu itself (its output is capped by MAX_PROGRAM_OUTPUT_BYTES).
KERNELS_MAX_FILES: Final = 64
KERNELS_MAX_TEXT_BYTES: Final = 64 * 1024 * 1024
KERNELS_DEFAULT_TOP: Final = 20
KERNELS_MAX_TOP: Final = 200
# Mangled kernel names are demangled by c++filt, given as arguments: at most this many bytes of names a run (far
# below any system's argument limit) and this many names a call (a report or trace holds a few hundred kernels).
KERNELS_DEMANGLE_BATCH_BYTES: Final = 64 * 1024
KERNELS_DEMANGLE_MAX_NAMES: Final = 4096
KERNELS_DEMANGLE_TIMEOUT_S: Final = 10.0
# The trace kernels listed as not profiled, with the ncu command for them.
KERNELS_MAX_UNPROFILED: Final = 10
# summarize_trace names the ncu command for at most this many of a compute-dominated trace's top kernels.
TRACE_NCU_TOP_KERNELS: Final = 3

# telemetry_history: a Prometheus-compatible API read over HTTP. Prometheus refuses a range query of more than 11,000
# points per series; each range query here asks for at most TELEMETRY_QUERY_POINTS points in all (series x points),
# stepping coarser over long windows, and an instant query for at most TELEMETRY_MAX_SERIES series.
TELEMETRY_QUERY_POINTS: Final = 10_000
TELEMETRY_MAX_POINTS_PER_SERIES: Final = 1_440  # the default step: 30 s, or window / this, whichever is longer
TELEMETRY_DEFAULT_STEP_S: Final = 30.0  # dcgm-exporter's default collect interval
TELEMETRY_MIN_STEP_S: Final = 1.0
TELEMETRY_MAX_STEP_S: Final = 3600.0
TELEMETRY_MAX_WINDOW_S: Final = 31 * 86400.0
TELEMETRY_DEFAULT_WINDOW_S: Final = 3600.0  # no start given: the last hour
TELEMETRY_MAX_SERIES: Final = 8192  # one instant query's answer (512 nodes x 8 GPUs x 2 jobs)
TELEMETRY_MAX_DETAIL_GPUS: Final = 64  # GPUs whose series are read point by point (the candidates of a verdict)
TELEMETRY_MAX_BYTES: Final = 64 * 1024 * 1024  # one API answer
TELEMETRY_QUERY_TIMEOUT_S: Final = 15.0  # one query, on the server (its timeout parameter) and on the socket
TELEMETRY_MAX_FILTERS: Final = 512  # nodes or GPUs named in a call
TELEMETRY_MAX_EVENTS: Final = 200  # timeline rows
# step_change: the slowdowns of one job whose GPU series are read (each reads every selected GPU's series over its
# twenty minutes: about ten range queries). A job that slows more often than this flaps (a periodic stall: see
# find_stragglers' periodic dips); the first ones name the GPUs, the rest are counted.
TELEMETRY_MAX_SLOWDOWNS: Final = 8
