"""Start-up: the server lists its tools from the shipped listing and imports a tool only on its first call, so
building it loads none of the engines; the listing is the tools' own (regenerated with their models)."""

from __future__ import annotations

import json
import subprocess
import sys

from mcp_server.schemas import live_listing, shipped_listing
from tests.helpers import REPO

ENGINES = ("numpy", "hyperscan", "re2", "msgspec", "prometheus_client", "psutil", "tools.gpu", "tools.traces")


def test_building_the_server_imports_no_engine() -> None:
    probe = ("import sys, json\nfrom mcp_server.server import build_server\nfrom mcp_server.settings import Settings\n"
             "from tools.core.paths import normalise_roots\nbuild_server(Settings(roots=normalise_roots(['.'])))\n"
             f"print(json.dumps([m for m in {ENGINES!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_shipped_listing_is_the_tools_own() -> None:
    shipped = shipped_listing()
    assert shipped is not None, "run python -m mcp_server.schemas --write"
    live = json.loads(json.dumps(live_listing()))
    assert [t["name"] for t in shipped] == [t["name"] for t in live]
    assert shipped == live, "a tool's model changed: run python -m mcp_server.schemas --write"


def test_the_agents_guide_lists_every_tool_from_the_registry() -> None:
    from mcp_server.registry import TOOLS
    from mcp_server.schemas import AGENTS_GUIDE, agents_tool_table, with_tool_table

    guide = AGENTS_GUIDE.read_text(encoding="utf-8")
    assert agents_tool_table() in guide, "run python -m mcp_server.schemas --write"
    assert with_tool_table(guide) == guide
    for spec in TOOLS:  # each tool once, with the command a shell user types
        assert guide.count(f"| `{spec.name}` | `gpu-triage {spec.cli_name}") == 1, spec.name
    assert "| `triage_report` | `gpu-triage report` |" in guide
