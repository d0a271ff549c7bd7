"""The SOP as data and as MCP surface: every branch file against its schema, every tool call in it against the
registry, the prompts and resources over the real MCP client, and an agent that follows triage_plan's calls on the
fault lab's real artifacts (NVML stand-in for the GPU, as in every GPU test here)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import sop
from mcp_server.registry import TOOLS, tool_by_name
from tests.helpers import DATA, REPO, base_env, h100, stdio_client, with_fake_nvml, write_scenario

pytestmark = pytest.mark.anyio

EXPECTED = {"triage", "gpu_utilization_low", "oom", "nccl_hang_or_slow", "straggler", "gpu_hardware", "loss_nan",
            "inference_latency", "torch_compile"}
TOP_KEYS = {"order", "title", "summary", "symptoms", "keywords", "steps", "table", "env", "commands", "references",
            "oscillation_keywords"}


def test_every_branch_file_matches_the_schema_and_names_real_tool_calls() -> None:
    files = sop.load_branch_files()
    assert set(files) == EXPECTED
    for branch_id, raw in files.items():
        assert set(raw) <= TOP_KEYS, (branch_id, set(raw) - TOP_KEYS)
        assert isinstance(raw["order"], int) and raw["title"] and raw["summary"]
        assert raw["symptoms"] and all(isinstance(s, str) and s for s in raw["symptoms"])
        assert set(raw["keywords"]) <= {"en", "zh", "patterns"} and raw["keywords"]["en"] and raw["keywords"]["zh"]
        for pattern in raw["keywords"].get("patterns", []):
            re.compile(pattern)
        ids = [s["id"] for s in raw["steps"]]
        assert ids and len(ids) == len(set(ids)), branch_id
        for step in raw["steps"]:
            assert set(step) <= {"id", "tool", "arguments", "decides", "if_oscillating"} and step["decides"]
            spec = tool_by_name(step["tool"])
            assert spec is not None, (branch_id, step["tool"])
            # The arguments are real arguments of that tool: validated by its own input model (placeholders such
            # as "<logs/rank*.log>" are strings where the tool takes a path).
            spec.input_model.model_validate(step.get("arguments", {}))
            spec.input_model.model_validate({**step.get("arguments", {}), **step.get("if_oscillating", {})})
        for row in raw.get("table", []):
            assert set(row) == {"signal", "cause", "fix", "verify"} and all(row.values())
        for env in raw.get("env", []):
            assert set(env) == {"name", "value", "why"} and env["name"].isupper()
        for command in raw.get("commands", []):
            assert set(command) == {"command", "why"}
            assert not any(bad in command["command"] for bad in ("watch ", " -l ", "tail -f", "nvtop", "htop"))
        assert raw.get("references"), branch_id
        for reference in raw["references"]:
            assert set(reference) == {"title", "url"} and reference["url"].startswith("https://")
    assert list(sop.branches())[0] == "triage"


async def test_prompts_and_resources_over_mcp() -> None:
    async with stdio_client(base_env()) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        slow = await client.get_prompt("triage", {"symptom": "训练很慢，GPU 利用率只有 40%"})
        hang = await client.get_prompt("triage", {"symptom": "8 卡训练在 step 1200 卡住", "fr_dir": "fr/",
                                                  "slurm_job": "4242"})
        branch = await client.get_prompt("sop_straggler", {"context": "rank 3 is slow"})
        report = await client.get_prompt("triage_report", {"logs": "logs/rank*.log", "fr_dir": "fr/"})
        rules = await client.read_resource("sop://rules")
        page = await client.read_resource("sop://nccl_hang_or_slow")
    assert prompts == {"triage", "triage_report"} | {f"sop_{b}" for b in EXPECTED}
    slow_text = slow.messages[0].content.text  # type: ignore[union-attr]
    assert "SOP branch: `gpu_utilization_low`" in slow_text and "`summarize_trace(" in slow_text
    assert "symptom | root cause | evidence | fix | verification" in slow_text
    hang_text = hang.messages[0].content.text  # type: ignore[union-attr]
    assert "SOP branch: `nccl_hang_or_slow`" in hang_text and "`analyze_flight_recorder(path='fr/')`" in hang_text
    assert "`dump_stacks(slurm_job='4242')`" in hang_text and "`health_check(slurm_job='4242')`" in hang_text
    assert "The user reports: rank 3 is slow" in branch.messages[0].content.text  # type: ignore[union-attr]
    assert "Never open a GUI or TUI" in rules.contents[0].text  # type: ignore[union-attr]
    report_text = report.messages[0].content.text  # type: ignore[union-attr]
    assert "`triage_report(logs=['logs/rank*.log'], fr_dir='fr/')`" in report_text
    page_text = page.contents[0].text  # type: ignore[union-attr]
    assert "## Steps (in order)" in page_text and "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in page_text
    assert "flight_recorder_tutorial" in page_text


async def _follow(client: Any, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Make every planned call that has all its inputs, as an agent would; return each result by tool."""
    results = {}
    for step in plan["steps"]:
        if step["needs"]:
            continue
        result = await client.call_tool(step["tool"], step["arguments"])
        assert result.is_error is False, (step, result.content[0].text)
        results[step["tool"]] = result.structured_content
    return results


async def test_an_agent_follows_the_plan_to_the_right_verdict(tmp_path: Path) -> None:
    # A node of four healthy-looking GPUs at 40 % utilisation (NVML stand-in).
    scenario = write_scenario(tmp_path / "gpus.json", [h100(util_gpu=40, bus_id=f"00000000:{18 + i:02X}:00.0")
                                                       for i in range(4)])
    env = with_fake_nvml(base_env(PATH="/usr/bin:/bin"), scenario)
    hang_args = {"symptom": "8 卡训练在 step 1200 卡住",
                 "logs": [str(DATA / "logs" / "lab" / "rank_conditional_allgather" / "rank*.log")],
                 "stacks": [str(DATA / "stacks" / "rank_conditional_allgather" / "pyspy_text")],
                 "fr_dir": str(DATA / "flight_recorder" / "rank_conditional_allgather")}
    slow_args = {"symptom": "训练很慢，GPU 利用率只有 40%",
                 "traces": [str(DATA / "traces" / "resnet50_num_workers_0")]}
    async with stdio_client(env, "--root", str(REPO)) as client:
        hang_plan = (await client.call_tool("triage_plan", hang_args)).structured_content
        hang = await _follow(client, hang_plan)
        slow_plan = (await client.call_tool("triage_plan", slow_args)).structured_content
        slow = await _follow(client, slow_plan)
    assert hang_plan["branch"] == "nccl_hang_or_slow" and hang_plan["confidence"] >= 0.5
    assert [s["tool"] for s in hang_plan["steps"]] == ["health_check", "diagnose_logs", "dump_stacks",
                                                        "analyze_flight_recorder", "check_interconnect"]
    network = hang_plan["steps"][-1]  # the job's logs filled in (relative to the root); nccl-tests, captures asked
    assert network["arguments"]["nccl_logs"] == [str(Path(log).relative_to(REPO)) for log in hang_args["logs"]]
    assert len(network["needs"]) == 2
    assert set(hang) == {"health_check", "diagnose_logs", "dump_stacks", "analyze_flight_recorder"}
    assert [(s["rank"], s["function"]) for s in hang["dump_stacks"]["suspects"]] == [(0, "save_checkpoint")]
    assert [(s["rank"], s["reason"]) for s in hang["analyze_flight_recorder"]["suspects"]] == [(0, "mismatched_op")]
    assert hang["diagnose_logs"]["severity"] == "crit"  # the gloo timeouts of the same job
    assert slow_plan["branch"] == "gpu_utilization_low"
    assert {"health_check", "nvidia_smi_query", "summarize_trace"} <= set(slow)
    assert slow["summarize_trace"]["causes"][0]["kind"] == "data_loading"
    gpus = slow["nvidia_smi_query"]["summary"]
    assert any("utilization" in row["field"] and row["median"] == 40 for row in gpus), gpus
    # Steps without their input are kept in the plan and say what to ask for, not dropped silently.
    assert {tuple(s["needs"]) for s in slow_plan["steps"] if s["needs"]} == {("logs/rank*.log",),
                                                                           ("the training script, e.g. train.py",),
                                                                           ("trace after the fix",),
                                                                           ("the Nsight Compute report of the top "
                                                                            "kernels (.ncu-rep, ncu --csv or text)",)}
    # The SOP's last step verifies the fix: the trace the user gave is the baseline, the new run is still to come.
    verify = slow_plan["steps"][-1]
    assert (verify["tool"], verify["arguments"]["before"]) == ("compare_runs",
                                                              str(Path(slow_args["traces"][0]).relative_to(REPO)))


def test_no_keyword_means_the_entry_and_a_question() -> None:
    import anyio

    from tools.core.context import ToolContext
    from tools.triage.plan import TriagePlanInput, triage_plan

    plan = anyio.run(triage_plan, TriagePlanInput(symptom="something is off"), ToolContext(roots=()))
    assert plan.branch == "triage" and plan.confidence == 0.0
    assert [s.tool for s in plan.steps] == ["health_check", "diagnose_logs"]
    assert plan.conclusion[0].startswith("No branch's keywords occur in the symptom")
    english = anyio.run(triage_plan, TriagePlanInput(symptom="the 64-GPU job hangs at step 1200, NCCL watchdog "
                                                             "timeout"), ToolContext(roots=()))
    assert english.branch == "nccl_hang_or_slow"
    straggler = anyio.run(triage_plan, TriagePlanInput(symptom="why is rank 3 slow? one rank is always last"),
                          ToolContext(roots=()))
    assert straggler.branch == "straggler"
    # The mission's own question: a substring keyword cannot see "rank 3 ... slow", the branch's pattern can.
    for words in ("why is rank 3 slow?", "rank 3 很慢", "node 7 is always behind"):
        plan_ = anyio.run(triage_plan, TriagePlanInput(symptom=words), ToolContext(roots=()))
        assert plan_.branch == "straggler", (words, plan_.alternatives)
    slurm = anyio.run(triage_plan, TriagePlanInput(symptom="the 64-GPU job hangs at step 1200", slurm_job="4242"),
                      ToolContext(roots=()))
    assert {s.tool: s.arguments.get("slurm_job") for s in slurm.steps if s.tool in ("health_check", "dump_stacks")} \
        == {"health_check": "4242", "dump_stacks": "4242"}
    slow_rank = anyio.run(triage_plan, TriagePlanInput(symptom="why is rank 3 slow?", slurm_job="4242",
                                                       logs=["logs/rank*.log"]), ToolContext(roots=()))
    gpu_step = next(s for s in slow_rank.steps if s.step == "gpu")
    assert gpu_step.arguments == {"logs": ["logs/rank*.log"], "slurm_job": "4242"}
    # An nsys capture in the user's words, English or Chinese: the trace branch, the report filled in.
    for words in ("nsys timeline shows kernel gaps, where is the bottleneck?", "nsys 时间线上瓶颈在哪"):
        nsys = anyio.run(triage_plan, TriagePlanInput(symptom=words, traces=["run.nsys-rep"]), ToolContext(roots=()))
        assert nsys.branch == "gpu_utilization_low", (words, nsys.alternatives)
        assert next(s for s in nsys.steps if s.tool == "summarize_trace").arguments == {"path": "run.nsys-rep"}
    # The network in the user's words: the collective branch, whose network step is check_interconnect.
    for words in ("all-reduce is slow between our nodes", "scaling efficiency is low at 64 GPUs", "多机通信慢"):
        net = anyio.run(triage_plan, TriagePlanInput(symptom=words, logs=["logs/rank*.log"]), ToolContext(roots=()))
        assert net.branch == "nccl_hang_or_slow", (words, net.alternatives)
        step = next(s for s in net.steps if s.tool == "check_interconnect")
        assert step.arguments["nccl_logs"] == ["logs/rank*.log"]
    # The host side in the user's words: sample_host, then profile_cpu, on the pids given.
    host = anyio.run(triage_plan, TriagePlanInput(symptom="GPU util is low and the CPU is at 100%", pids=[4242]),
                     ToolContext(roots=()))
    assert host.branch == "gpu_utilization_low"
    steps = {s.tool: s for s in host.steps}
    assert steps["sample_host"].arguments == {"duration_s": 10, "pid": [4242]}
    assert steps["profile_cpu"].arguments == {"duration_s": 5, "pid": [4242]} and not steps["profile_cpu"].needs
    assert [s.tool for s in host.steps].index("sample_host") < [s.tool for s in host.steps].index("profile_cpu")
    # Utilisation that comes and goes: windows long enough for three cycles, the step logs for the period in steps,
    # and on a Slurm job every node's host.
    for words in ("GPU 利用率忽高忽低", "GPU utilization fluctuates and drops every few seconds"):
        wavy = anyio.run(triage_plan, TriagePlanInput(symptom=words, logs=["logs/rank*.log"], slurm_job="77"),
                         ToolContext(roots=()))
        steps = {s.tool: s for s in wavy.steps}
        assert wavy.branch == "gpu_utilization_low", words
        assert steps["nvidia_smi_query"].arguments["count"] == 40 and steps["nvidia_smi_query"].arguments[
            "step_logs"] == ["logs/rank*.log"]
        assert steps["sample_host"].arguments == {"duration_s": 40, "step_logs": ["logs/rank*.log"], "slurm_job": "77"}
        assert steps["profile_cpu"].arguments == {"duration_s": 5, "slurm_job": "77"}
    # No words to go by but a profile handed over: the branch that reads it, and a question for the user.
    bare = anyio.run(triage_plan, TriagePlanInput(symptom="what is wrong here?", traces=["job.sqlite"]),
                     ToolContext(roots=()))
    assert (bare.branch, bare.confidence) == ("gpu_utilization_low", 0.0)
    assert next(s for s in bare.steps if s.tool == "summarize_trace").arguments == {"path": "job.sqlite"}
    assert bare.conclusion[0].startswith("No branch's keywords occur in the symptom, but traces were given")


async def test_every_listed_tool_keeps_the_contract() -> None:
    # The rules that a tool's contract can enforce, checked on whatever tools/list says (not a hand-made list):
    # structured output, read-only annotations, and inputs bounded in the schema itself.
    async with stdio_client(base_env()) as client:
        tools = (await client.list_tools()).tools
        plans = await client.call_tool("triage_plan", {"symptom": "x" * 2001})
    assert len(tools) == len(TOOLS)
    for tool in tools:
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        for key in ("severity", "conclusion", "next_steps"):
            assert key in tool.output_schema["properties"], (tool.name, key)
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
        for name, prop in tool.input_schema.get("properties", {}).items():
            for kind in prop.get("anyOf", [prop]):
                where = f"{tool.name}.{name}"
                if kind.get("type") == "array":
                    assert "maxItems" in kind, where
                    item = kind.get("items", {})
                    assert item.get("type") != "string" or "maxLength" in item or "enum" in item, where
                if kind.get("type") == "string":
                    assert "maxLength" in kind or "enum" in kind, where
                if kind.get("type") in ("integer", "number"):
                    assert "maximum" in kind, where
    assert plans.is_error and "at most 2000 characters" in plans.content[0].text


def test_next_steps_name_sop_steps() -> None:
    import anyio

    from tools.core.context import ToolContext
    from tools.hangs.flight_recorder import AnalyzeFlightRecorderInput, analyze_flight_recorder
    from tools.hangs.stacks import DumpStacksInput, dump_stacks
    from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs

    ctx = ToolContext(roots=(REPO,))
    stacks = anyio.run(dump_stacks, DumpStacksInput(from_files=[str(DATA / "stacks" / "rank_conditional_allgather" /
                                                                    "pyspy_text")]), ctx)
    assert (stacks.next_steps[0].branch, stacks.next_steps[0].step) == ("nccl_hang_or_slow", "flight_recorder")
    assert stacks.next_steps[0].action.startswith("analyze_flight_recorder(")
    recorder = anyio.run(analyze_flight_recorder, AnalyzeFlightRecorderInput(
        path=str(DATA / "flight_recorder" / "rank_conditional_allgather")), ctx)
    assert any(s.step == "stacks" and s.action == "dump_stacks()" for s in recorder.next_steps)
    logs = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[str(DATA / "logs" / "lab" / "rank_conditional_allgather"
                                                                 / "rank*.log")]), ctx)
    assert logs.next_steps[0].step == "stacks"


def test_tools_point_at_sop_steps_when_healthy_too() -> None:
    import anyio

    from tools.core.context import ToolContext
    from tools.gpu.smi_query import NvidiaSmiQueryInput, nvidia_smi_query
    from tools.logs.grep import GrepLogsInput, grep_logs
    from tools.traces.summary import SummarizeTraceInput, summarize_trace

    ctx = ToolContext(roots=(REPO,))
    capture = DATA / "nvidia_smi" / "query_gpu_h200_allfields_idle_header_units.csv"
    smi = anyio.run(nvidia_smi_query, NvidiaSmiQueryInput(csv_path=str(capture)), ctx)
    trace = anyio.run(summarize_trace, SummarizeTraceInput(path=str(DATA / "traces" / "resnet50_num_workers_0")), ctx)
    grep = anyio.run(grep_logs, GrepLogsInput(paths=[str(DATA / "logs" / "lab" / "nan_loss" / "*.log")]), ctx)
    assert [(s.branch, s.step) for s in trace.next_steps] == [("gpu_utilization_low", "trace")]
    assert [(s.branch, s.step) for s in grep.next_steps] == [("triage", "logs")]
    assert all(s.step is not None for s in smi.next_steps), smi.next_steps


def test_busy_but_slow_words_reach_the_sm_activity_step() -> None:
    import anyio

    from tools.core.context import ToolContext
    from tools.triage.plan import TriagePlanInput, triage_plan

    for words in ("util is 100% but it is slow", "SM 利用率很低", "nvidia-smi says 100% yet SM activity is low",
                  "are we even using the tensor cores?"):
        plan = anyio.run(triage_plan, TriagePlanInput(symptom=words), ToolContext(roots=()))
        assert plan.branch == "gpu_utilization_low", (words, plan.alternatives)
        activity = [s for s in plan.steps if s.tool == "gpu_activity"]
        assert len(activity) == 1 and activity[0].arguments == {"samples": 5, "interval_s": 1.0}, words


def test_every_log_rule_pattern_compiles() -> None:
    """diagnose_logs compiles a rule's patterns on first use (start-up time): a broken one must fail here, not on
    the first log that holds its line."""
    from tools.logs.diagnose import load_rules

    rules, matcher = load_rules()
    assert len(rules) > 60 and len(matcher.patterns) == len(rules)
    for rule in rules:
        for pattern in (rule.match, *rule.facts):
            assert pattern.compiled() is not None, rule.id
