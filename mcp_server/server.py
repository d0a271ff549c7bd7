"""The MCP server: registers every tool of the registry under the one contract, over stdio or HTTP.

Each tool is exposed with its input model's fields as arguments, its result model as outputSchema,
all four annotations set, markdown text for the model and the same result as structured content.
Expected failures become tool errors whose text says what to do; anything else is logged here with
its traceback and reported to the client as an internal error, and the server keeps serving.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import sys
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import BeforeValidator, Field
from pydantic.fields import FieldInfo

from mcp_server import __version__
from mcp_server.client_config import CLIENTS, checked_roots, client_config
from mcp_server.process import return_freed_memory
from mcp_server.prompts import add_prompts
from mcp_server.registry import TOOLS, ToolSpec, tool_by_name
from mcp_server.schemas import shipped_listing
from mcp_server.settings import Settings, add_settings_arguments, settings_from_args
from sop import branch_ids, branch_markdown, index_markdown
from tools.core.errors import TriageError

__all__ = ["build_server", "main"]

log = logging.getLogger("gpu_triage_mcp")

VERSION = __version__

INSTRUCTIONS = (
    "Read-only triage of slow or hung GPU training and inference jobs. Start with triage_plan on the user's words "
    "(or the triage prompt) and health_check, then follow each result's next_steps (SOP branches, sop://index). "
    "Results are a markdown table plus at most three sentences; the same data is in structuredContent. Severity "
    "unknown means the inputs did not decide: never report it as ok; collect what `decides` names. Rules: "
    "never cat large traces or logs (use these tools), no GUI/TUI, nothing unbounded (no watch, -l, tail -f), "
    "git --no-pager, structured output; answer with one table (symptom | root cause | evidence | fix | "
    "verification) and at most three sentences, citing an official reference per fix (sop://rules)."
)


def annotations_for(spec: ToolSpec) -> ToolAnnotations:
    # All four hints set explicitly: the spec's defaults for absent hints are the worst case.
    return ToolAnnotations(
        title=spec.title,
        read_only_hint=spec.read_only,
        destructive_hint=False,
        idempotent_hint=spec.read_only,
        open_world_hint=spec.open_world,
    )


class TriageServer(MCPServer):
    """MCPServer whose argument errors are the contract's: unknown arguments refused (the SDK drops them
    silently), and one readable message per problem instead of pydantic's raw report.

    With a shipped listing (mcp_server/schemas.py) it lists the tools from it and imports a tool's package only
    when the tool is first called; without one, every tool is registered the SDK's way at start."""

    def __init__(self, settings: Settings, listing: list[dict[str, Any]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._settings = settings
        self._listing = [MCPTool.model_validate(tool) for tool in listing] if listing is not None else None
        self._handlers: dict[str, Any] = {}

    async def list_tools(self) -> list[MCPTool]:
        return list(self._listing) if self._listing is not None else await super().list_tools()

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        if self._listing is None:
            return super()._tool_input_schema(name)
        return next((tool.input_schema for tool in self._listing if tool.name == name), None)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        from mcp_server.contract import validate_arguments

        spec = tool_by_name(name)
        if spec is None:
            raise ToolError(f"unknown tool {name!r}; tools/list names them.")
        try:
            validate_arguments(spec, arguments)
        except TriageError as exc:
            raise ToolError(str(exc)) from exc
        if self._listing is None:
            return await super().call_tool(name, arguments, context)
        handler = self._handlers.get(name) or self._handlers.setdefault(name, _handler(spec, self._settings))
        return await handler(mcp_context=context, **arguments)


def _handler(spec: ToolSpec, settings: Settings) -> Any:
    """An async function whose signature is the tool's input fields, so the SDK derives the schema."""

    from mcp_server.contract import execute  # here, not at import: the server starts without the tools
    from mcp_server.render import render_markdown

    async def handler(mcp_context: Context, **arguments: Any) -> CallToolResult:
        async def report(progress: float, total: float | None, message: str | None) -> None:
            await mcp_context.report_progress(progress, total, message)  # a no-op without a progressToken

        try:
            result = await execute(spec, arguments, settings, report)
        except TriageError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:
            log.exception("tool %s failed unexpectedly", spec.name)
            raise ToolError(
                f"internal error in {spec.name} ({type(exc).__name__}); the traceback is in the server's "
                "log. Retry with other arguments or report it; the server is still serving."
            ) from exc
        return CallToolResult(
            content=[TextContent(type="text", text=render_markdown(result, spec.title))],
            structured_content=result.model_dump(mode="json"),
        )

    # The request's context (progress), which the SDK injects and leaves out of the schema.
    parameters = [inspect.Parameter("mcp_context", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    for field_name, field in spec.input_model.model_fields.items():
        # Constraints travel in the Annotated metadata; the default stays on the parameter.
        annotation: Any = Annotated.__class_getitem__(  # type: ignore[attr-defined]
            (field.annotation, *field.metadata, *_one_or_many(field), _describe(field))
        )
        default = field.get_default(call_default_factory=True) if not field.is_required() else inspect.Parameter.empty
        parameters.append(inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))
    handler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=Annotated[CallToolResult, spec.result_model]
    )
    handler.__name__ = spec.name
    handler.__doc__ = spec.function.__doc__
    return handler


def _describe(field: FieldInfo) -> Any:
    return Field(description=field.description)


def _one_or_many(field: FieldInfo) -> list[Any]:
    """A list of paths takes one path as a bare string too (the input model wraps it; tools/core/models.py), and
    its schema says so, so that a client checking arguments against the schema sends it."""
    from tools.core.models import PathArg, is_path_list  # here: the server starts without the models

    if not is_path_list(field.annotation):
        return []
    as_list = Annotated.__class_getitem__((field.annotation, *field.metadata))  # type: ignore[attr-defined]
    return [BeforeValidator(lambda value: [value] if isinstance(value, str) else value,
                            json_schema_input_type=as_list | PathArg)]


def build_server(settings: Settings) -> MCPServer:
    """The server as it runs: the tools listed from the shipped listing, each imported on its first call."""
    listing = shipped_listing()
    if listing is None:
        return eager_server(settings)
    server = TriageServer(settings, listing, name="gpu-triage", version=VERSION, instructions=INSTRUCTIONS,
                          log_level="WARNING")
    _add_sop_resources(server)
    add_prompts(server)
    return server


def eager_server(settings: Settings) -> MCPServer:
    """Every tool imported and registered the SDK's way (the source of the shipped listing)."""
    server = TriageServer(settings, None, name="gpu-triage", version=VERSION, instructions=INSTRUCTIONS,
                          log_level="WARNING")
    for spec in TOOLS:
        server.add_tool(_handler(spec, settings), name=spec.name, title=spec.title,
                        description=spec.description, annotations=annotations_for(spec))
    _add_sop_resources(server)
    add_prompts(server)
    return server


def _add_sop_resources(server: MCPServer) -> None:
    """The SOP as resources: sop://index and sop://<branch id>, both markdown."""

    @server.resource("sop://index", name="sop-index", title="Triage SOP: branches", mime_type="text/markdown")
    def sop_index() -> str:
        return index_markdown()

    @server.resource("sop://{branch}", name="sop-branch", title="Triage SOP branch", mime_type="text/markdown")
    def sop_branch(branch: str) -> str:
        page = branch_markdown(branch)
        if page is None:
            raise ResourceError(f"unknown SOP branch {branch!r}; sop://index lists them: "
                                f"{', '.join(sorted(branch_ids()))}")
        return page


def _parse_http(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT or PORT, got {value!r}") from None


def _print_config(args: argparse.Namespace) -> int:
    """The registration with the settings this command was given (flags, else GPU_TRIAGE_* variables) carried into
    its env; refused (exit 3) when a root is missing or a setting out of range, as the server itself would be."""
    roots = args.root or [r for r in os.environ.get("GPU_TRIAGE_ROOTS", "").split(os.pathsep) if r]
    try:
        checked_roots(roots)  # first: it names a missing root best
        settings = settings_from_args(args)
    except TriageError as exc:
        print(f"gpu-triage-mcp --print-config: {exc}", file=sys.stderr)
        return 3
    given_timeout = args.timeout is not None or bool(os.environ.get("GPU_TRIAGE_TIMEOUT_S"))
    given_bytes = args.max_bytes is not None or bool(os.environ.get("GPU_TRIAGE_MAX_BYTES"))
    sys.stdout.write(client_config(args.print_config, roots, settings.timeout_s if given_timeout else None,
                                   settings.max_bytes if given_bytes else None))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-triage-mcp", description=INSTRUCTIONS)
    parser.add_argument("--http", metavar="HOST:PORT", type=_parse_http, default=None,
                        help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST defaults "
                        "to 127.0.0.1).")
    parser.add_argument("--version", action="version", version=f"gpu-triage-mcp {VERSION}")
    parser.add_argument("--print-config", choices=CLIENTS, metavar="CLIENT",
                        help=f"Print the registration of this install for an MCP client ({', '.join(CLIENTS)}), "
                        "with absolute paths and the --root directories, and exit.")
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    if args.print_config:
        return _print_config(args)
    return_freed_memory()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = settings_from_args(args)
    except TriageError as exc:
        print(f"gpu-triage-mcp: {exc}", file=sys.stderr)
        return 3
    server = build_server(settings)
    if args.http:
        host, port = args.http
        if host not in ("127.0.0.1", "localhost", "::1"):
            log.warning("serving on %s: the tools read files under %s; bind to loopback unless you mean it",
                        host, ", ".join(map(str, settings.roots)))
        shown = f"[{host}]" if ":" in host else host
        print(f"gpu-triage-mcp: serving MCP (streamable HTTP) at http://{shown}:{port}/mcp", file=sys.stderr,
              flush=True)
        server.run("streamable-http", host=host, port=port)
    else:
        if sys.stdin.isatty():  # a person who ran it by hand, not a client: say why nothing happens
            print("gpu-triage-mcp: waiting for an MCP client on stdin; see --help", file=sys.stderr, flush=True)
        server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
