"""diagnose_logs stays quiet on healthy logs: the benign corpus (tests/data/logs/benign_corpus, committed training and
inference logs of public repositories, provenance and why each is healthy in its cases.jsonl and PROVENANCE.md), each
file diagnosed alone through the real MCP server over stdio, as a client calls it. A warn or crit finding on any of
them is a false alarm (benchmarks/accuracy_logs.py scores the same set as "benign corpus N/N quiet")."""

from __future__ import annotations

import json

import pytest

from tests.helpers import DATA, base_env, stdio_client, structured

pytestmark = pytest.mark.anyio

CORPUS = DATA / "logs" / "benign_corpus"


def _cases() -> list[dict[str, object]]:
    return [json.loads(line) for line in (CORPUS / "cases.jsonl").read_text().splitlines() if line.strip()]


def test_the_manifest_and_the_folder_name_the_same_healthy_excerpts() -> None:
    cases = _cases()
    assert sorted(str(c["file"]) for c in cases) == sorted(p.name for p in CORPUS.glob("*.log"))
    assert {(c["category"], c["severity"]) for c in cases} == {("benign", "info")}
    assert all(c["url"] and c["notes"] and c["repo"] for c in cases)


async def test_no_healthy_log_gets_a_warn_or_crit_finding() -> None:
    alarms: dict[str, list[str]] = {}
    async with stdio_client(base_env(), "--root", str(CORPUS)) as client:
        for case in _cases():
            result = structured(await client.call_tool("diagnose_logs", {"paths": [case["file"]]}))
            serious = [f"{f['category']}/{f['rule']}/{f['severity']} at line {f['first']['line']}: "
                       f"{f['first']['text'][:160]}" for f in result["findings"] if f["severity"] in ("warn", "crit")]
            if serious:
                alarms[str(case["file"])] = serious
    assert not alarms, json.dumps(alarms, indent=1, ensure_ascii=False)
