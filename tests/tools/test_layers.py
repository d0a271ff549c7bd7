"""The layers of tools/, read from the source itself (every import, those inside functions too):

- tools/ holds only its __init__.py and packages: tools/core/ and one package per kind of evidence;
- nothing under tools/ imports MCP (mcp_server/ registers the tools);
- core imports no domain; a domain imports another domain only through that package's public names (its
  __init__'s __all__), never from its modules, never a name with a leading underscore;
- the packages import each other without cycles.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict

from tests.helpers import REPO

TOOLS = REPO / "tools"


def _imports() -> list[tuple[str, str, list[str], int]]:
    """(importing package, imported module, names, line) for every import of a tools module under tools/."""
    found = []
    for path in sorted(TOOLS.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        package = parts[1] if len(parts) > 2 else "tools"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append((package, node.module, [a.name for a in node.names], node.lineno))
            elif isinstance(node, ast.Import):
                found += [(package, a.name, [], node.lineno) for a in node.names]
    return found


def _domain_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "tools" and len(parts) > 1 else None


def test_tools_top_holds_only_packages() -> None:
    top = sorted(p.name for p in TOOLS.iterdir() if p.name != "__pycache__")
    assert [p for p in top if not (TOOLS / p).is_dir() and p != "__init__.py"] == []
    assert {"core", "gpu", "logs", "traces", "hangs", "stragglers", "triage"} <= set(top)
    assert all((TOOLS / p / "__init__.py").is_file() for p in top if (TOOLS / p).is_dir())


def test_no_mcp_import_under_tools() -> None:
    offending = [(pkg, mod) for pkg, mod, _, _ in _imports() if mod == "mcp" or mod.startswith("mcp.")]
    assert offending == []


def test_domains_meet_only_through_public_names() -> None:
    offending = []
    for package, module, names, line in _imports():
        target = _domain_of(module)
        if target is None or target == package or package == "tools":
            continue
        if package == "core":
            offending.append(f"core imports {module} (line {line}): core must not depend on a domain")
        elif target != "core":
            public = set(importlib.import_module(f"tools.{target}").__all__)
            if module != f"tools.{target}":
                offending.append(f"{package} imports {module} (line {line}): import from tools.{target}")
            offending += [f"{package} imports {target}.{n}, not in its __all__" for n in names if n not in public]
    assert offending == []


def test_every_public_name_exists() -> None:
    for package in sorted(p.name for p in TOOLS.iterdir() if (p / "__init__.py").is_file() and p.name != "core"):
        module = importlib.import_module(f"tools.{package}")
        assert module.__all__, package
        missing = [n for n in module.__all__ if not hasattr(module, n) or n.startswith("_")]
        assert missing == [], package


def test_packages_import_each_other_without_cycles() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for package, module, _, _ in _imports():
        target = _domain_of(module)
        if target is not None and package != "tools" and target != package:
            edges[package].add(target)
    # Depth-first search for a back edge; the path it finds is the cycle to break.
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle.extend([*path, node, nxt])
                return True
            if nxt not in state and visit(nxt, [*path, node]):
                return True
        state[node] = 2
        return False

    assert not any(visit(p, []) for p in sorted(edges) if p not in state), " -> ".join(cycle)
    assert edges["core"] == set()
    assert "triage" not in set().union(*(edges[p] for p in edges if p != "triage"))  # nothing stands on triage
