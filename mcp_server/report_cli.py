"""`gpu-triage report`: the triage_report tool as the one command a CI job or a newcomer runs.

Flags name the job's artifacts; `--demo` takes the sample artifacts bundled with the package (mcp_server/samples,
real files with provenance) and adds their folder to the roots. The report goes to stdout (markdown, or JSON with
`--json`) or to `--out FILE` (checked before any work); a line of progress goes to stderr; the exit code is the
worst severity (0 ok, 1 warn, 2 crit, 4 unknown) or 3 when the report could not be made (mcp_server/usage.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import anyio

from mcp_server.contract import execute
from mcp_server.registry import tool_by_name
from mcp_server.render import render_markdown, to_json
from mcp_server.settings import add_settings_arguments, settings_from_args
from mcp_server.shell_paths import absolute_paths
from mcp_server.terminal import terminal_progress
from mcp_server.usage import EXIT_CODES_HELP, UsageParser
from tools.core.errors import BadInput

__all__ = ["SAMPLES", "report_main"]

SAMPLES = Path(str(resources.files("mcp_server").joinpath("samples")))
REPORT_MAX_BYTES = 32 * 1024  # a report has several tables; the server's per-call default is 8 KiB


def _parser() -> argparse.ArgumentParser:
    parser = UsageParser(prog="gpu-triage report", description=__doc__.split("\n")[0], epilog=EXIT_CODES_HELP)
    parser.add_argument("--logs", action="append", default=[], metavar="GLOB", help="The job's logs (repeatable).")
    parser.add_argument("--traces", action="append", default=[], metavar="PATH", help="A trace file or folder.")
    parser.add_argument("--baseline", metavar="PATH", help="The run before the fix (a trace or step-time logs): "
                        "the report compares it with --traces (else --logs).")
    parser.add_argument("--stacks", action="append", default=[], metavar="PATH", help="Saved stack dumps.")
    parser.add_argument("--fr-dir", metavar="DIR", help="Folder of flight-recorder dumps.")
    parser.add_argument("--memory", metavar="PATH", help="An allocator snapshot, memory_summary text, memory_stats "
                        "dump or OOM log.")
    parser.add_argument("--pids", metavar="P,P", help="Live worker pids to dump stacks of (comma-separated).")
    parser.add_argument("--job", choices=["auto"], help="auto: dump the stacks of the torchrun job on this host.")
    parser.add_argument("--slurm-job", metavar="JOBID", help="A running Slurm job: health and stacks of every node, "
                        "and its stdout/stderr (from scontrol) as the logs when --logs is not given.")
    parser.add_argument("--metrics", metavar="URL_OR_FILE", help="An inference server's /metrics (vLLM, SGLang).")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="A host besides loopback whose --metrics URL may be scraped (repeatable).")
    parser.add_argument("--compile-logs", action="append", default=[], metavar="GLOB",
                        help="Logs written with TORCH_LOGS=graph_breaks,recompiles (repeatable).")
    parser.add_argument("--sample-host", action="store_true", help="Sample this host's disks, CPUs and memory for "
                        "5 s (sample_host), with the --pids' workers.")
    parser.add_argument("--profile-cpu", action="store_true", help="Record the --pids' CPU time for 5 s with py-spy "
                        "(profile_cpu).")
    parser.add_argument("--nccl-logs", action="append", default=[], metavar="GLOB",
                        help="Logs with NCCL_DEBUG=INFO lines, for check_interconnect (repeatable).")
    parser.add_argument("--nccl-tests", action="append", default=[], metavar="GLOB",
                        help="nccl-tests outputs, for check_interconnect (repeatable).")
    parser.add_argument("--net-captures", action="append", default=[], metavar="GLOB",
                        help="Saved topo -m / nvlink / ibstat / ibv_devinfo / ethtool outputs (repeatable).")
    parser.add_argument("--symptom", help="What the user reported (for the record).")
    parser.add_argument("--no-health", action="store_true", help="Skip the GPU/host health check.")
    parser.add_argument("--demo", action="store_true", help="Use the sample artifacts bundled with the package.")
    parser.add_argument("--out", metavar="FILE", help="Write the report there instead of stdout.")
    parser.add_argument("--json", action="store_true", help="The structured result as JSON.")
    add_settings_arguments(parser)
    return parser


def _check_out(out: str) -> None:
    """Refuse an --out the report could not be written to, before the report is made (minutes of work lost)."""
    target = Path(out)
    if target.is_dir():
        raise BadInput(f"--out {out} is a folder.", "Name a file to write the report to, e.g. --out report.md.")
    folder = target.parent
    if not folder.is_dir():
        raise BadInput(f"--out {out}: the folder {folder} does not exist.", "Create it first, or name a file in an "
                       "existing folder.")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise BadInput(f"--out {out} is not writable by this user.", "Name a file in a folder you can write to.")


def report_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.out:
        _check_out(args.out)
    arguments: dict[str, Any] = {"logs": args.logs, "traces": args.traces, "stacks": args.stacks,
                                 "health": not args.no_health}
    if args.fr_dir:
        arguments["fr_dir"] = args.fr_dir
    if args.memory:
        arguments["memory"] = args.memory
    if args.symptom:
        arguments["symptom"] = args.symptom
    if args.baseline:
        arguments["baseline"] = args.baseline
    if args.metrics:
        arguments.update(metrics=args.metrics, allow_host=args.allow_host)
    if args.compile_logs:
        arguments["compile_logs"] = args.compile_logs
    if args.profile_cpu:
        arguments["profile_cpu"] = True
    if args.sample_host:
        arguments["sample_host"] = True
    for name in ("nccl_logs", "nccl_tests", "net_captures"):
        if getattr(args, name):
            arguments[name] = getattr(args, name)
    if args.pids:
        try:
            arguments["pids"] = [int(p) for p in args.pids.split(",") if p.strip()]
        except ValueError as exc:
            raise BadInput(f"--pids {args.pids!r} is not a comma-separated list of numbers.") from exc
    if args.job:
        arguments["job"] = True
    if args.slurm_job:
        arguments["slurm_job"] = args.slurm_job
    if args.demo:
        arguments.update(logs=[str(SAMPLES / "logs" / "rank*.log")], stacks=[str(SAMPLES / "stacks")],
                         fr_dir=str(SAMPLES / "flight_recorder"), traces=[str(SAMPLES / "traces")])
        args.root = [*(args.root or []), str(SAMPLES)] if args.root else [str(SAMPLES)]
    if args.max_bytes is None:
        args.max_bytes = REPORT_MAX_BYTES
    settings = settings_from_args(args)
    spec = tool_by_name("triage_report")
    assert spec is not None
    ran = [name for name, on in (("health", arguments["health"]), ("logs", arguments["logs"]),
                                 ("traces", arguments["traces"]), ("stacks", arguments["stacks"] or args.pids
                                                                   or args.job or args.slurm_job),
                                 ("flight recorder", args.fr_dir or args.demo), ("memory", args.memory),
                                 ("metrics", args.metrics), ("compile logs", args.compile_logs),
                                 ("interconnect", args.nccl_logs or args.nccl_tests or args.net_captures),
                                 ("cpu profile", args.profile_cpu), ("host sample", args.sample_host),
                                 ("baseline", args.baseline)) if on]
    print(f"gpu-triage report: {', '.join(ran)} ...", file=sys.stderr, flush=True)
    report = terminal_progress("gpu-triage report")
    try:
        result = anyio.run(execute, spec, absolute_paths(spec.input_model, arguments), settings, report)
    finally:
        if report is not None:
            sys.stderr.write("\r\x1b[2K")
    text = to_json(result) + "\n" if args.json else render_markdown(result, spec.title)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:  # checked before, but a disk can fill or a folder go meanwhile
            raise BadInput(f"--out {args.out}: the report could not be written ({exc.strerror}).",
                           "Name a file in a folder you can write to; the report was not saved.") from exc
        print(f"gpu-triage report: written to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return result.severity.exit_code
