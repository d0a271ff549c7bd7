"""diagnose_logs stays quiet on healthy logs: the benign corpus (tests/data/logs/benign_corpus, committed training and
inference logs of public repositories, provenance and why each is healthy in its cases.jsonl and PROVENANCE.md), each
file diagnosed alone through the real MCP server over stdio, as a client calls it. A warn or crit finding on any of
them is a false alarm (benchmarks/accuracy_logs.py scores the same set as "benign corpus N/N quiet")."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA, base_env, stdio_client, structured
from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs

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



def test_a_probe_that_caught_its_import_error_is_quiet_but_the_same_error_uncaught_is_not(tmp_path: Path) -> None:
    # The corpus's xformers start-up (LoRA_Easy_Training_Scripts#287): the traceback's outermost frame is the probe
    # `_is_triton_available`, so it was caught inside it. The same final exception raised from the script's
    # `<module>` (an import the program needs) still stops the run.
    probe = (CORPUS / "benign__derrian-distro-lora-easy-training-scripts-287.log").read_text()
    uncaught = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    import triton\n"
                "ModuleNotFoundError: No module named 'triton'\n")
    serious: dict[str, list[str]] = {}
    for name, text in (("probe.log", probe), ("uncaught.log", uncaught)):
        (tmp_path / name).write_text(text)
        result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[name]), ToolContext(roots=(tmp_path,)))
        serious[name] = [f.category for f in result.findings if f.severity in ("warn", "crit")]
    assert serious["probe.log"] == []
    assert serious["uncaught.log"] != []
