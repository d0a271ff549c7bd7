"""Pure functions of the contract: path confinement, redaction, the byte budget, SOP references."""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_origin

import pytest

from mcp_server.render import fit_to_budget, render_markdown, to_json
from sop import branch_ids, branches
from tools.core.errors import BadInput
from tools.core.models import Coverage, NextStep, Severity, worst
from tools.core.paths import confine
from tools.core.redact import redact_text
from tools.gpu.smi_query import NvidiaSmiQueryResult, SmiRow


def test_confine(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("x")
    os.symlink(root / "a" / "f.txt", root / "inner-link")
    os.symlink("/etc", root / "etc-link")
    roots = (root.resolve(),)
    assert confine("a/f.txt", roots) == (root / "a" / "f.txt").resolve()
    assert confine(str(root / "a" / "f.txt"), roots) == (root / "a" / "f.txt").resolve()
    assert confine("inner-link", roots) == (root / "a" / "f.txt").resolve()  # symlink staying inside: fine
    assert confine("a/../a/f.txt", roots) == (root / "a" / "f.txt").resolve()  # `..` that stays inside: fine
    os.symlink(root / "loop", root / "loop")
    for bad, message in [("etc-link/passwd", "resolves through a symlink to /etc/passwd, outside"),
                         ("/etc/passwd", "resolves to /etc/passwd, outside"), ("a/../../x", "outside the allowed"),
                         ("loop", "symlink loop"),
                         ("", "1 to"), ("a/\x00", "NUL"), ("-x", "starts with '-'"), ("a/missing", "does not exist")]:
        with pytest.raises(BadInput, match=message):
            confine(bad, roots)


@pytest.mark.parametrize(("text", "expected"), [
    ("--hf-token hf_abcdefghijklmnopqrstuvwxyz12", "--hf-token [REDACTED]"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "export AWS_SECRET_ACCESS_KEY=[REDACTED]"),
    ("id AKIAIOSFODNN7EXAMPLE here", "id [REDACTED] here"),
    ('{"api_key": "sk-proj-abcdefghijklmnopqrstuv"}', '{"api_key": "[REDACTED]"}'),
    ("Authorization: Bearer abcdefgh.ijklmnop", "Authorization: [REDACTED] [REDACTED]"),
    ("step 12 loss 1.93 tokens/s 45012 num_tokens 4096", "step 12 loss 1.93 tokens/s 45012 num_tokens 4096"),
    ("max_tokens=512 NCCL_IB_AUTH=0", "max_tokens=512 NCCL_IB_AUTH=0"),
    ("no inter-token histogram on the page", "no inter-token histogram on the page"),
    ("vllm serve m --api-key abcdef123", "vllm serve m --api-key [REDACTED]"),
    ("token: abcdef123456", "token: [REDACTED]"),
])
def test_redaction(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def _result(rows: int) -> NvidiaSmiQueryResult:
    return NvidiaSmiQueryResult(
        severity=Severity.ok, conclusion=["Fine."], source="file", query="gpu", fields=["index", "name"], samples=1,
        sampled_at="2026-11-29T00:00:00+00:00", findings=[], summary=[],
        rows=[SmiRow(sample=0, values={"index": i, "name": f"GPU number {i}"}) for i in range(rows)],
    )


def test_budget_keeps_small_results_whole_and_cuts_big_ones_exactly() -> None:
    small = _result(3)
    assert fit_to_budget(small, "t", 4096) is small
    big = _result(500)
    cut = fit_to_budget(big, "t", 4096)
    text = render_markdown(cut, "t")
    assert len(text.encode()) <= 4096
    assert cut.truncated is not None and cut.truncated.rows_cut == {"rows": 500 - len(cut.rows)}
    # As many rows as fit: one more would break the text budget or the JSON's (3 x the text budget).
    one_more = big.model_copy(update={"rows": big.rows[: len(cut.rows) + 1], "truncated": cut.truncated})
    assert len(render_markdown(one_more, "t").encode()) > 4096 or len(to_json(one_more).encode()) > 3 * 4096
    assert len(to_json(cut).encode()) <= 3 * 4096
    assert [r.values["index"] for r in cut.rows] == list(range(len(cut.rows)))  # the first rows are kept


def test_every_cuttable_table_names_a_list_of_its_result() -> None:
    """fit_to_budget cuts a table by the result field it names: a name that is not a list field of the result
    (a dotted path, a typo) fails only on a result too big for the budget, as a 5 GB trace's 1000 steps did. Each
    result type is built empty (lists empty, other fields their defaults or None) and its tables are read."""
    from mcp_server.registry import TOOLS

    checked = set()
    for tool in TOOLS:
        model = tool.result_model
        values: dict[str, object] = {}
        for name, spec in model.model_fields.items():
            origin = get_origin(spec.annotation)
            values[name] = [] if origin is list else {} if origin is dict else (
                None if spec.is_required() else spec.get_default(call_default_factory=True))
        try:
            tables = model.model_construct(**values).tables()
        except (TypeError, AttributeError):
            continue  # a table that needs a non-list field filled in: not checkable empty
        for table in tables:
            if table.source_field:
                assert get_origin(model.model_fields[table.source_field].annotation) is list, (
                    f"{model.__name__}: table {table.title!r} cuts {table.source_field!r}, not a list field")
        checked.add(model.__name__)
    assert {"SummarizeTraceResult", "CompareRunsResult", "HealthCheckResult", "DiagnoseLogsResult"} <= checked
    assert len(checked) >= len(TOOLS) - 3


def test_sop_branches_and_next_step_validation() -> None:
    assert {"triage", "gpu_utilization_low", "oom", "nccl_hang_or_slow", "straggler", "loss_nan",
            "inference_latency", "torch_compile", "gpu_hardware"} == branch_ids()
    assert all(b.title and b.summary and b.symptoms for b in branches().values())
    with pytest.raises(ValueError, match="unknown SOP branch 'hardware'"):
        NextStep(branch="hardware", action="x", why="y")


def test_a_row_wider_than_the_budget_gets_shorter_cells_then_fewer_columns() -> None:
    # One row of 200 fields (an all-fields nvidia-smi capture is like it): no row cut can help.
    fields = [f"field.number_{i}" for i in range(200)]
    wide = NvidiaSmiQueryResult(
        severity=Severity.ok, conclusion=["Fine."], source="file", query="gpu", fields=fields, samples=1,
        sampled_at="2026-11-29T00:00:00+00:00", findings=[], summary=[],
        rows=[SmiRow(sample=0, values={f: "a value of some forty characters, or more" for f in fields})])
    for budget in (8192, 2048):
        cut = fit_to_budget(wide, "t", budget)
        text = render_markdown(cut, "t")
        assert len(text.encode()) <= budget
        assert cut.truncated is not None and cut.truncated.cell_chars == 20 and cut.truncated.columns_shown
        shown = cut.truncated.columns_shown
        assert f"tables to {shown} columns" in text and "more columns are in the JSON" in text
        # As many columns as fit: one more would not.
        wider = cut.truncated.model_copy(update={"columns_shown": shown + 1})
        assert len(render_markdown(cut.model_copy(update={"truncated": wider}), "t").encode()) > budget
        assert len(cut.rows[0].values) == 200  # the JSON keeps every field


def _judged(**fields: object) -> NvidiaSmiQueryResult:
    from tools.core.verdict import judged

    result = _result(1).model_copy(update=fields)
    judgement = judged(result)
    assert isinstance(judgement, NvidiaSmiQueryResult)
    return judgement


def test_ok_needs_something_read_and_nothing_not_understood() -> None:
    read = Coverage.read("gpus.csv", "2 rows")
    strange = Coverage.not_understood("mpstat.txt", "a table with columns CPU %usr %sys",
                                      ["nvidia-smi --query-gpu CSV"])
    assert _judged(coverage=[read]).severity is Severity.ok  # read, nothing wrong: ok stands
    nothing = _judged(coverage=[])
    assert nothing.severity is Severity.unknown and nothing.conclusion[0].startswith("Cannot judge: no input")
    assert nothing.decides
    mixed = _judged(coverage=[read, strange], conclusion=["No GPU problem in the capture."])
    assert mixed.severity is Severity.unknown
    assert "1 of 2 inputs were not understood (mpstat.txt: a table with columns CPU %usr %sys)" in mixed.conclusion[0]
    assert mixed.conclusion[1] == "Of what was read: no GPU problem in the capture."
    assert mixed.decides == "The same call on inputs in a format it reads: nvidia-smi --query-gpu CSV."
    # A problem seen stands, whatever else could not be read; an unknown the tool explained keeps its words.
    assert _judged(coverage=[read, strange], severity=Severity.warn).severity is Severity.warn
    own = _judged(coverage=[read], severity=Severity.unknown, decides="A capture of 20 samples.")
    assert own.decides == "A capture of 20 samples." and own.conclusion == ["Fine."]
    assert _judged(coverage=[Coverage.partial("gpus.csv", "cut at row 10")]).severity is Severity.ok


def test_severity_order_and_exit_codes() -> None:
    assert worst([Severity.ok, Severity.unknown]) is Severity.unknown
    assert worst([Severity.unknown, Severity.warn]) is Severity.warn
    assert worst([Severity.crit, Severity.unknown]) is Severity.crit
    assert [s.exit_code for s in (Severity.ok, Severity.warn, Severity.crit, Severity.unknown)] == [0, 1, 2, 4]


def test_markdown_shows_caveats_inputs_not_read_and_what_would_decide() -> None:
    result = _result(1).model_copy(update={
        "severity": Severity.unknown, "decides": "Run nvidia-smi on the node.",
        "notes": [f"note {i}" for i in range(7)],
        "coverage": [Coverage.read("a.csv"), Coverage.partial("b.csv", "cut at row 10"),
                     Coverage.not_understood("c.txt", "looks like vmstat", ["nvidia-smi CSV"])]})
    text = render_markdown(result, "t")
    assert text.startswith("## t: unknown")
    assert "**What would decide:** Run nvidia-smi on the node." in text
    assert "**Inputs not read whole** (1 of 3 read whole):" in text
    assert "- `b.csv`: partial, cut at row 10" in text
    assert "- `c.txt`: not understood, looks like vmstat (formats read: nvidia-smi CSV)" in text
    assert "**Caveats:**\n- note 0\n" in text and "- note 4\n- and 2 more in `notes`" in text
    assert "note 5" not in text
    assert text.index("**Conclusion:**") < text.index("**Caveats:**")
    plain = render_markdown(_result(1).model_copy(update={"coverage": [Coverage.read("a.csv")]}), "t")
    assert "Caveats" not in plain and "not read whole" not in plain and "would decide" not in plain


def test_a_long_cell_is_cut_at_a_words_end_never_inside_a_word() -> None:
    from mcp_server.render import _cell

    text = ("in all_gather while ranks 1-3 wait in all_reduce (DDP backward, from the Python frames) at "
            "rank_conditional_allgather.py:47 train_step")
    cut = _cell(text, 80)
    assert cut == "in all_gather while ranks 1-3 wait in all_reduce (DDP backward, from the…"
    assert len(cut) <= 80 and _cell(text, 200) == text
    assert _cell("x" * 50, 20) == "x" * 19 + "…"  # one word longer than the room: cut where the room ends
