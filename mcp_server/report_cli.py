"""`gpu-triage report`: the triage_report tool as the one command a CI job or a newcomer runs.

Its flags are triage_report's arguments, generated from the input model as every subcommand's are (mcp_server/cli.py),
so the CLI and MCP take the same ones. Besides: `--demo` takes the sample artifacts bundled with the package
(mcp_server/samples, real files with provenance) as the inputs, and refuses inputs of the caller's beside them; the
report goes to stdout (markdown, or JSON with `--json`) or to `--out FILE` (checked before any work). One line on
stderr says what runs (piped too: a CI log shows what the report covered), and on a terminal a progress line; the exit
code is the worst severity (0 ok, 1 warn, 2 crit, 4 unknown) or 3 when the report could not be made.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import anyio

from mcp_server.contract import execute, validate_arguments
from mcp_server.registry import ToolSpec
from mcp_server.render import render_markdown, to_json
from mcp_server.settings import settings_from_args
from mcp_server.shell_paths import absolute_paths
from mcp_server.terminal import terminal_progress
from tools.core.errors import BadInput

__all__ = ["SAMPLES", "add_report_arguments", "run_report"]

SAMPLES = Path(str(resources.files("mcp_server").joinpath("samples")))
REPORT_MAX_BYTES = 32 * 1024  # a report has several tables; the server's per-call default is 8 KiB


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """What `report` has beyond triage_report's own flags (generated from its input model, as every subcommand's)."""
    parser.add_argument("--demo", action="store_true", help="Run on the sample artifacts bundled with the package "
                        "(a real hung 4-rank job and a real input-bound trace); not with inputs of your own.")
    parser.add_argument("--out", metavar="FILE", help="Write the report there instead of stdout (checked first).")


# What runs, for the line on stderr: its name and the inputs that make it run.
_RUNS = (("health", ("health",)), ("logs", ("logs", "slurm_job")), ("traces", ("traces",)),
         ("stacks", ("stacks", "pids", "job", "slurm_job")), ("flight recorder", ("fr_dir",)), ("memory", ("memory",)),
         ("metrics", ("metrics",)), ("compile logs", ("compile_logs",)),
         ("interconnect", ("nccl_logs", "nccl_tests", "net_captures")), ("cpu profile", ("profile_cpu",)),
         ("host sample", ("sample_host",)), ("baseline", ("baseline",)), ("telemetry", ("prometheus",)))
_DEMO_INPUTS = ("logs", "traces", "stacks", "fr_dir", "memory", "pids", "job", "slurm_job", "metrics", "compile_logs",
                "baseline", "nccl_logs", "nccl_tests", "net_captures", "prometheus")


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


def run_report(spec: ToolSpec, arguments: dict[str, Any], args: argparse.Namespace) -> int:
    """`gpu-triage report`: triage_report with `arguments` (its flags, as parsed for every subcommand), the demo's
    samples, the report's larger byte budget, a line on stderr naming what runs, and `--out`."""
    if args.out:
        _check_out(args.out)
    if args.demo:
        given = [name for name in _DEMO_INPUTS if arguments.get(name)]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise BadInput(f"--demo runs on the bundled samples; it takes no inputs of your own (got {flags}).",
                           "Drop --demo to report on your inputs, or drop the inputs to see the demo.")
        arguments.update(logs=[str(SAMPLES / "logs" / "rank*.log")], stacks=[str(SAMPLES / "stacks")],
                         fr_dir=str(SAMPLES / "flight_recorder"), traces=[str(SAMPLES / "traces")])
        args.root = [*(args.root or []), str(SAMPLES)]
    if args.max_bytes is None:
        args.max_bytes = REPORT_MAX_BYTES
    settings = replace(settings_from_args(args), cwd=Path.cwd())  # a path in the answer as a shell means it
    arguments = absolute_paths(spec.input_model, arguments)
    validate_arguments(spec, arguments)  # a bad argument is refused before the line says what runs
    on = {**arguments, "health": arguments.get("health", True)}
    ran = [label for label, names in _RUNS if any(on.get(name) for name in names)]
    print(f"gpu-triage report: {', '.join(ran) or 'nothing to run'} ...", file=sys.stderr, flush=True)
    report = terminal_progress("gpu-triage report")
    try:
        result = anyio.run(execute, spec, arguments, settings, report)
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
