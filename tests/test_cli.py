"""The CLI: same tools and contract as the server, exit codes for CI gating, names that agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tools
from mcp_server.cli import build_parser, main
from mcp_server.registry import TOOLS
from tests.helpers import DATA, H200, REPO, base_env, run_cli, with_fake_smi


def test_registry_tools_all_and_cli_agree() -> None:
    names = [spec.name for spec in TOOLS]
    assert sorted(names) == sorted(tools.__all__)
    for spec in TOOLS:
        assert getattr(tools, spec.name) is spec.function
    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    # One subcommand per tool, the tool's name with dashes; triage_report is `report`, the one newcomers run.
    assert sorted(subcommands) == sorted("report" if n == "triage_report" else n.replace("_", "-") for n in names)


def test_every_subcommand_prints_its_help(capsys) -> None:
    for spec in TOOLS:
        try:
            main([spec.cli_name, "--help"])
        except SystemExit as exit_:
            assert exit_.code == 0, spec.cli_name
        text = capsys.readouterr().out
        assert f"usage: gpu-triage {spec.cli_name}" in text and "--json" in text


def test_bad_input_exits_3_with_an_actionable_message(capsys) -> None:
    assert main(["nvidia-smi-query", "--count", "0"]) == 3
    err = capsys.readouterr().err
    assert "count: Input should be greater than or equal to 1 (got 0)" in err
    assert main(["nvidia-smi-query", "--max-bytes", "10"]) == 3
    assert "--max-bytes 10 is out of range. Use 1024 to 262144." in capsys.readouterr().err
    assert main(["nvidia-smi-query", "--csv-path", "../../../../../../../../etc/passwd"]) == 3
    assert "resolves to /etc/passwd, outside the allowed roots" in capsys.readouterr().err


def test_usage_errors_exit_3_never_a_severity(tmp_path: Path) -> None:
    """argparse exits 2 on a usage error, which is the code of a critical finding: a CI gating on it would page
    someone for a typo. Every usage error exits 3 with argparse's message, before any work."""
    env = base_env()
    for argv, message in [(["nvidia-smi-query", "--feilds", "index"], "unrecognized arguments: --feilds"),
                          (["no-such-tool"], "invalid choice: 'no-such-tool'"), ([], "required: COMMAND"),
                          (["nvidia-smi-query", "--count", "two"], "argument --count: invalid int value: 'two'"),
                          (["report", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
                          (["report", "--pids", "one,two"],
                           "argument --pids: 'one,two' is not a comma-separated list of numbers")]:
        done = run_cli(argv, env)
        assert done.returncode == 3 and message in done.stderr and "Traceback" not in done.stderr, (argv, done.stderr)
        assert done.stdout == ""
    help_text = run_cli(["--help"], env).stdout
    assert "4 unknown" in help_text and "3 the call failed" in help_text
    assert "4 unknown" in run_cli(["report", "--help"], env).stdout


def test_report_out_is_checked_before_any_work(tmp_path: Path) -> None:
    env = base_env()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    for out, message in [(tmp_path / "missing" / "r.md", f"the folder {tmp_path / 'missing'} does not exist"),
                         (tmp_path, "is a folder")] + ([] if os.geteuid() == 0 else
                                                       [(locked / "r.md", "is not writable")]):
        done = run_cli(["report", "--demo", "--out", str(out)], env, cwd=tmp_path)
        assert done.returncode == 3 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        # Refused before the report ran: no progress line, nothing written.
        assert "gpu-triage report: health" not in done.stderr and not (tmp_path / "missing").exists()


def test_exit_code_follows_the_worst_finding() -> None:
    env = with_fake_smi(base_env(), f"capture:{H200}")
    ok = run_cli(["nvidia-smi-query", "--fields", "index,temperature.gpu"], env)
    assert ok.returncode == 0 and "| 0 | 28 |" in ok.stdout
    warn = run_cli(["nvidia-smi-query", "--count", "5", "--interval-s", "0.2", "--fields", "index,utilization.gpu"],
                   env)
    assert warn.returncode == 1 and "GPU 0 utilisation (median of 5)" in warn.stdout


def test_console_scripts_are_installed_and_run() -> None:
    bindir = Path(sys.executable).parent
    done = subprocess.run([bindir / "gpu-triage", "health-check", "--json", "--sample-s", "0.1", "--top-processes", "0",
                           "--no-include-kernel-log"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode in (0, 1, 2, 4), done.stderr
    assert json.loads(done.stdout)["top_processes"] == []
    version = subprocess.run([bindir / "gpu-triage-mcp", "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == "gpu-triage-mcp 0.1.0"


def test_log_commands_take_paths_as_arguments_and_head_tail_shortcuts(tmp_path: Path) -> None:
    for rank in range(2):
        (tmp_path / f"rank{rank}.log").write_text("".join(f"step {i} ERROR e{i}x\n" for i in range(1, 6)))
    env = base_env()
    tail = run_cli(["grep-logs", "--json", "--root", str(tmp_path), "rank0.log", "rank1.log", "--tail", "1"], env)
    head = run_cli(["grep-logs", "--json", "--root", str(tmp_path), "rank*.log", "--head", "1"], env)
    assert tail.returncode == 0 and head.returncode == 0, tail.stderr + head.stderr
    t, h = json.loads(tail.stdout), json.loads(head.stdout)
    assert (t["mode"], [(m["rank"], m["line"], m["count"]) for m in t["matches"]]) == ("tail", [(0, 1, 5)])
    assert (h["mode"], [(m["rank"], m["line"]) for m in h["matches"]]) == ("head", [(0, 1)])
    both = run_cli(["diagnose-logs", "--json", "--root", str(tmp_path), "rank0.log", "--paths", "rank1.log"], env)
    assert [f["file"] for f in json.loads(both.stdout)["files"]] == ["rank0.log", "rank1.log"]
    missing = run_cli(["grep-logs", "--root", str(tmp_path)], env)
    assert missing.returncode == 3 and "paths: Field required" in missing.stderr


def test_paths_mean_what_a_shell_means(tmp_path: Path) -> None:
    """From a shell: a relative path is relative to the working directory, `..` is followed, and the one check is
    that the resolved path lies inside a root; the refusal names the resolved path and the roots."""
    data = tmp_path / "data"
    run7, traces = data / "run7", data / "traces"
    run7.mkdir(parents=True)
    traces.mkdir()
    (run7 / "rank0.log").write_text("step 1 ok\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    trace = next((REPO / "tests" / "data" / "traces" / "resnet50_num_workers_0").glob("*.json*"))
    (traces / trace.name).write_bytes(trace.read_bytes())
    env = base_env()
    # cd /data/run7 && gpu-triage grep-logs rank0.log --root /data
    done = run_cli(["grep-logs", "rank0.log", "--pattern", "CUDA error", "--json", "--root", str(data)], env,
                   cwd=run7)
    assert done.returncode == 0 and json.loads(done.stdout)["files"][0]["matches"] == 1, done.stderr
    # From a sibling folder, `..` that stays inside the root is followed.
    done = run_cli(["summarize-trace", f"../traces/{trace.name}", "--json", "--root", str(data)], env, cwd=run7)
    assert done.returncode in (0, 1, 2) and json.loads(done.stdout)["steps"], done.stderr
    # The default root is the working directory: the sibling folder lies outside it, and the error says where.
    done = run_cli(["summarize-trace", f"../traces/{trace.name}"], env, cwd=run7)
    assert done.returncode == 3
    assert f"resolves to {traces / trace.name}, outside the allowed roots ({run7})" in done.stderr, done.stderr
    # A symlink loop is a clear refusal, not an internal error.
    (run7 / "loop.log").symlink_to(run7 / "loop.log")
    done = run_cli(["grep-logs", "loop.log", "--pattern", "x"], env, cwd=run7)
    assert done.returncode == 3 and "symlink loop" in done.stderr and "internal error" not in done.stderr, done.stderr


def test_one_report_command_with_every_flag_triage_report_has_over_mcp(tmp_path: Path) -> None:
    """`report` is listed in --help and takes every argument of the MCP tool; --demo beside inputs is refused, never
    silently dropped."""
    env = base_env()
    listing = run_cli(["--help"], env).stdout
    assert "    report  " in listing and "triage-report" not in listing
    help_text = run_cli(["report", "--help"], env).stdout
    from tools.triage import TriageReportInput

    for name in TriageReportInput.model_fields:
        assert f"--{name.replace('_', '-')}" in help_text, name
    assert "--demo" in help_text and "--out FILE" in help_text
    for extra in (["--logs", "logs/rank*.log"], ["--traces", "t.json"], ["--fr-dir", "fr"], ["--job"],
                  ["--prometheus", "http://127.0.0.1:9090"]):
        done = run_cli(["report", "--demo", *extra], env, cwd=tmp_path)
        assert done.returncode == 3 and done.stdout == "", (extra, done.stderr)
        assert f"--demo runs on the bundled samples; it takes no inputs of your own (got {extra[0]})" in done.stderr
        assert "gpu-triage report: health" not in done.stderr  # refused before anything ran


def test_gpu_triage_version() -> None:
    done = run_cli(["--version"], base_env())
    assert done.returncode == 0 and done.stdout.strip() == "gpu-triage 0.1.0", done.stdout + done.stderr


def test_check_interconnect_takes_its_files_positionally_and_tells_them_apart_by_content() -> None:
    """As its siblings: `gpu-triage check-interconnect FILES`, with an NCCL log, an nccl-tests output and an ibstat
    capture (real outputs of public threads, tests/data/interconnect/wild/PROVENANCE.md) in any order; each is read as
    what it is, and the answer is the one the three flags give."""
    wild = DATA / "interconnect" / "wild"
    log, tests, ibstat = ("flannel-roce-horovod__nccl-224.log", "nccl_tests__NVIDIA-nccl-1706.txt",
                          "ibstat__NVIDIA-nccl-1591.txt")
    env = base_env()
    positional = run_cli(["check-interconnect", ibstat, tests, log, "--json"], env, cwd=wild)
    flagged = run_cli(["check-interconnect", "--nccl-logs", log, "--nccl-tests", tests, "--captures", ibstat, "--json"],
                      env, cwd=wild)
    assert positional.returncode == flagged.returncode == 1, positional.stderr + flagged.stderr
    told, given = json.loads(positional.stdout), json.loads(flagged.stdout)
    assert {c["input"]: (c["status"], c["detail"]) for c in told["coverage"]} == {
        ibstat: ("read", "ibstat"), log: ("read", "NCCL lines of 4 process(es)"),
        tests: ("read", "nccl-tests: 1 run(s)")}
    assert told == given and told["verdict"] == "wrong_interface"
    # A file that is none of them (the lab's training log, no NCCL_DEBUG) is read as a log for its NCCL lines, and
    # says it has none: unknown, never ok.
    other = run_cli(["check-interconnect", "rank0.log", "--json"], env, cwd=DATA / "logs" / "lab" / "straggler_steps")
    assert other.returncode == 4, other.stderr
    assert [(c["input"], c["status"], c["detail"]) for c in json.loads(other.stdout)["coverage"]] == [
        ("rank0.log", "not_understood", "no NCCL INFO/WARN line in it")]
