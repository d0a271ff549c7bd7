"""`gpu-triage <tool-name-with-dashes> [--field value ...]`: the same tools, contract and rendering as
the MCP server, for humans and CI scripts.

Flags are generated from each tool's input model. Output is the markdown (default) or the structured
result (--json). Exit codes are mcp_server/usage.py's: 0 ok, 1 warning, 2 critical, 4 unknown, 3 the call
failed (usage error, bad input, tool failure); an unexpected crash prints one line and also exits 3 (traceback
only with GPU_TRIAGE_DEBUG=1).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import types
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import anyio

from mcp_server import __version__
from mcp_server.contract import execute
from mcp_server.process import return_freed_memory
from mcp_server.registry import TOOLS, ToolSpec
from mcp_server.render import render_markdown, to_json
from mcp_server.settings import add_settings_arguments, settings_from_args
from mcp_server.shell_paths import absolute_paths
from mcp_server.terminal import terminal_progress
from mcp_server.usage import EXIT_BAD_INPUT, EXIT_CODES_HELP, UsageParser
from tools.core.errors import TriageError
from tools.core.models import InputModel

__all__ = ["main"]


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """(the type inside Optional / list, whether it is a list)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(inner[0]) if len(inner) == 1 else (str, False)
    if origin is list:
        return typing.get_args(annotation)[0], True
    return annotation, False


def _list_of(item_type: Any) -> Any:
    def parse(text: str) -> list[Any]:
        try:
            return [item_type(part) for part in text.split(",") if part.strip()]
        except ValueError:
            kind = "numbers" if item_type in (int, float) else "values"
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {kind}") from None

    return parse


class _ExtendFlat(argparse.Action):
    """Collects the values of a repeatable list option into one flat list."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        for value in values if self.nargs == "+" else [values]:
            items.extend(value)
        setattr(namespace, self.dest, items)


def _positionals(model: type[InputModel]) -> tuple[str, ...]:
    named = model.cli_positional
    return () if named is None else (named,) if isinstance(named, str) else named


def _add_model_arguments(parser: argparse.ArgumentParser, model: type[InputModel]) -> None:
    positionals = _positionals(model)
    for name, field in model.model_fields.items():
        flag = "--" + name.replace("_", "-")
        kind, is_list = _base_type(field.annotation)
        help_text = (field.description or "").replace("%", "%%")  # argparse formats help with %
        if name in positionals:
            # The inputs themselves, as a shell user types them: `gpu-triage grep-logs logs/rank*.log`. With two
            # (compare-runs BEFORE AFTER) each takes one word, and its flag a comma-separated list.
            parser.add_argument(name, nargs="*" if is_list and len(positionals) == 1 else "?", default=None,
                                metavar=name.upper(), help=help_text)
            parser.add_argument(flag, dest=f"{name}_flag", type=_list_of(kind) if is_list else str, default=None,
                                action=_ExtendFlat if is_list else "store",
                                metavar="A,B,..." if is_list else name.upper(),
                                help="The same" + (", repeatable, comma-separated." if is_list else "."))
            continue
        if kind is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif typing.get_origin(kind) is Literal:
            parser.add_argument(flag, dest=name, choices=typing.get_args(kind), default=None, help=help_text)
        elif is_list:
            # Repeatable and comma-separated (`--pid 1 --pid 2`, `--pid 1,2`); several values after one flag
            # too (`--from-files a b`) where no positional argument could be swallowed by it.
            parser.add_argument(flag, dest=name, type=_list_of(kind), default=None, action=_ExtendFlat,
                                nargs="+" if model.cli_positional is None else None, metavar="A,B",
                                help=help_text + " (repeatable, comma-separated)")
        else:
            parser.add_argument(flag, dest=name, type=kind if kind in (int, float) else str, default=None,
                                help=help_text)
    for option, (help_text, fixed, counted) in model.cli_shortcuts.items():
        parser.add_argument(option, dest=f"shortcut_{option.strip('-')}", type=int, default=None, metavar="N",
                            help=f"{help_text} (sets {', '.join(f'{k}={v}' for k, v in fixed.items())} and "
                            f"{counted}=N)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with `only`, just that subcommand gets its flags (so only its tool is imported)."""
    parser = UsageParser(
        prog="gpu-triage", description="Triage slow or hung GPU jobs (the tools of gpu-triage-mcp as commands).",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action="version", version=f"gpu-triage {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for spec in TOOLS:
        if only is not None and spec.cli_name != only:
            commands.add_parser(spec.cli_name, help=spec.title)
            continue
        sub = commands.add_parser(spec.cli_name, help=spec.title, description=spec.description, epilog=EXIT_CODES_HELP)
        _add_model_arguments(sub, spec.input_model)
        if spec.name == "triage_report":
            from mcp_server.report_cli import add_report_arguments

            add_report_arguments(sub)
        sub.add_argument("--json", action="store_true", help="Print the structured result as JSON.")
        add_settings_arguments(sub)
        sub.set_defaults(spec=spec)
    return parser


def _arguments(spec: ToolSpec, args: argparse.Namespace) -> dict[str, Any]:
    model = spec.input_model
    arguments = {name: getattr(args, name) for name in model.model_fields if getattr(args, name, None) is not None}
    for name in _positionals(model):
        positional = getattr(args, name)
        flagged = getattr(args, f"{name}_flag")
        arguments.pop(name, None)
        if isinstance(positional, list) or isinstance(flagged, list):
            merged = ([positional] if isinstance(positional, str) else positional or []) + (flagged or [])
            if merged:
                arguments[name] = merged
        elif positional is not None or flagged is not None:
            arguments[name] = positional if positional is not None else flagged
    for option, (_, fixed, counted) in model.cli_shortcuts.items():
        value = getattr(args, f"shortcut_{option.strip('-')}")
        if value is not None:
            arguments.update(fixed)
            arguments[counted] = value
    return arguments


def _run(spec: ToolSpec, args: argparse.Namespace) -> int:
    if spec.name == "triage_report":
        from mcp_server.report_cli import run_report

        return run_report(spec, _arguments(spec, args), args)
    arguments = absolute_paths(spec.input_model, _arguments(spec, args))
    settings = replace(settings_from_args(args), cwd=Path.cwd())  # a path in the answer as a shell means it
    report = terminal_progress(f"gpu-triage {spec.cli_name}")
    try:
        result = anyio.run(execute, spec, arguments, settings, report)
    finally:
        if report is not None:
            sys.stderr.write("\r\x1b[2K")  # the line goes once the answer is there
    sys.stdout.write(to_json(result) + "\n" if args.json else render_markdown(result, spec.title))
    return result.severity.exit_code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return_freed_memory()
    chosen = next((a for a in argv if not a.startswith("-")), None)
    known = {spec.cli_name for spec in TOOLS}
    args = build_parser(chosen if chosen in known else None).parse_args(argv)
    try:
        return _run(args.spec, args)
    except TriageError as exc:
        print(f"gpu-triage {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("GPU_TRIAGE_DEBUG") == "1":
            raise
        print(f"gpu-triage {args.command}: internal error ({type(exc).__name__}: {exc}); "
              "rerun with GPU_TRIAGE_DEBUG=1 for the traceback.", file=sys.stderr)
        return EXIT_BAD_INPUT


def console() -> None:
    """The `gpu-triage` command: main(), then an exit that nothing can hold up. A read stuck in the kernel (a
    stalled network or FUSE mount) leaves its thread, or a reader process, blocked for good; the interpreter's
    normal exit would wait for it, so a call past its deadline ends the process at once instead."""
    code = main()
    if code == EXIT_BAD_INPUT and threading.active_count() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
