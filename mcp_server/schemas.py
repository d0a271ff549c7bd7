"""The tools' listing (names, descriptions, input and output schemas, annotations) as a file shipped with the
package, so that the server answers `initialize` and `tools/list` without importing any tool or building any
schema: a tool's package is imported on its first call (startup time, issue 21).

The file is generated from the tools themselves (`python -m mcp_server.schemas --write`) and a test fails when it
differs from what they give now, so it cannot drift: a contributor who changes a tool's input or result model
regenerates it in the same commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["LISTING", "live_listing", "shipped_listing"]

LISTING = Path(__file__).with_name("tool_listing.json")


def live_listing() -> list[dict[str, Any]]:
    """The listing as the tools give it now: every tool registered the SDK's way, then listed."""
    import anyio

    from mcp_server.server import eager_server
    from mcp_server.settings import Settings
    from tools.core.paths import normalise_roots

    server = eager_server(Settings(roots=normalise_roots([Path.cwd()])))
    tools = anyio.run(server.list_tools)
    return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in tools]


def shipped_listing() -> list[dict[str, Any]] | None:
    """The listing shipped with the package, or None where it is missing (a checkout that never generated it)."""
    try:
        listing: list[dict[str, Any]] = json.loads(LISTING.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return listing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_server.schemas", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="Regenerate the shipped listing.")
    args = parser.parse_args(argv)
    live = live_listing()
    if args.write:
        LISTING.write_text(json.dumps(live, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {LISTING} ({len(live)} tools)")
        return 0
    if shipped_listing() != json.loads(json.dumps(live)):
        print(f"{LISTING.name} differs from the tools: run python -m mcp_server.schemas --write", file=sys.stderr)
        return 1
    print(f"{LISTING.name} matches the tools ({len(live)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
