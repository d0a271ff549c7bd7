"""diagnose_logs' learned fallback (issue 31, "learning where rules stop"; tools/logs/learned.py, sop/log_model.json
trained by benchmarks/train_log_model.py on the development sets only): deterministic, explains itself, never
overrides a rule, keeps every committed benign excerpt quiet."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.helpers import DATA, REPO
from tools.core.context import ToolContext
from tools.logs import learned
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs

DEV = DATA / "logs" / "round2" / "dev"
BENIGN = sorted([*(DATA / "logs" / "wild").glob("benign__*.log"), *(DATA / "logs" / "public").glob("benign__*.log"),
                 *DEV.glob("benign__*.log")])


@pytest.fixture(autouse=True)
def model_on() -> Iterator[None]:
    learned.OVERRIDE = True
    yield
    learned.OVERRIDE = None


def diagnose(path: Path) -> DiagnoseLogsResult:
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[path.name]), ToolContext(roots=(path.parent.resolve(),)))


def test_training_is_deterministic_and_the_shipped_file_is_what_it_trains() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import train_log_model

    data = train_log_model.examples()
    # never a held-out set: development folders and the benign corpus of healthy logs only
    assert {e.case.path.parent.name for e in data} <= {"wild", "public", "dev", "benign_corpus"}
    first, second = train_log_model.train(data), train_log_model.train(data)
    assert first == second
    assert (REPO / "sop" / "log_model.json").read_text() == first
    # Benign logs stay quiet where the model is consulted (no rule found a fault, none reported its category): the
    # model adds no alarm to what the rules alone raise.
    figures = json.loads(first)["cross_validation"]
    assert figures["rules_plus_model_benign_quiet"] == figures["rules_benign_quiet"] >= 0.99
    assert figures["guesses_added_wrong"] == 0 and figures["guesses_added_right"] > 0  # no voiced guess was wrong


def test_a_dev_excerpt_is_named_with_the_tokens_that_decided() -> None:
    nb, thresholds = learned.model()
    text = (DEV / "cuda_oom__360zhinao-11.log").read_text(errors="replace")
    guess = learned.guess(text, nb, thresholds)
    assert guess is not None and guess.category == "cuda_oom" and guess.probability >= thresholds["cuda_oom"]
    assert "allocate" in guess.tokens and "tried__allocate" in guess.tokens
    assert learned.guess(text, nb, thresholds, exclude=frozenset({"cuda_oom"})) is None  # a rule's category


def test_a_fault_no_rule_knows_is_a_learned_warn_with_its_tokens(tmp_path: Path) -> None:
    # A wording no rule matches (a synthetic line: every committed fault excerpt is matched by a rule).
    path = tmp_path / "job.log"
    path.write_text("WARN collective operation timeout watchdog allreduce seqnum\n")
    [finding] = diagnose(path).findings
    assert (finding.category, finding.severity, finding.rule) == ("nccl_timeout", "warn", "learned_fallback")
    assert finding.facts["learned"] is True and "watchdog" in str(finding.facts["tokens"])
    assert finding.cause.startswith("A learned guess, not a rule")
    learned.OVERRIDE = False
    assert not diagnose(path).findings


@pytest.mark.parametrize("name", ["cuda_oom__360zhinao-11.log", "dataloader__mmf-441.log"])
def test_never_overrides_a_rule_that_matched(name: str) -> None:
    path = DEV / name if (DEV / name).is_file() else DATA / "logs" / "wild" / name
    with_model = diagnose(path)
    learned.OVERRIDE = False
    rules_alone = diagnose(path)
    assert not any(f.rule == "learned_fallback" for f in with_model.findings)
    assert [f.model_dump() for f in with_model.findings] == [f.model_dump() for f in rules_alone.findings]


@pytest.mark.parametrize("path", BENIGN, ids=[p.name for p in BENIGN])
def test_benign_excerpts_stay_quiet(path: Path) -> None:
    assert not [f for f in diagnose(path).findings if f.severity != "info"]


def test_what_a_healthy_run_prints_is_no_evidence_but_a_failure_still_is() -> None:
    # Lines of the benign corpus's healthy logs (tests/data/logs/benign_corpus): a compiler warning in a DeepSpeed
    # op build, inductor's CUDAGraph advice, llama-server's orderly shutdown; beside them what a failing run prints.
    healthy = [
        "/home/<user>/site-packages/deepspeed/ops/csrc/transformer/inference/csrc/pt_binding.cpp:542:41: warning: "
        "narrowing conversion of 'k' from 'size_t' to 'long int' [-Wnarrowing]",
        "Recording too many CUDAGraphs may lead to extra overhead. We have observed 9 distinct sizes.",
        "srv    operator(): operator(): cleaning up before exit...",
        "worker exited with code 0",
    ]
    failing = [
        "csrc/pt_binding.cpp:542:41: error: 'InferenceContext' was not declared in this scope",
        "RuntimeError: Error building extension 'transformer_inference'",
        "worker exited with code 137",
    ]
    assert learned.error_lines("\n".join(healthy)) == []
    assert learned.error_lines("\n".join(healthy + failing)) == failing


def test_a_word_that_only_holds_an_error_word_is_no_error_line() -> None:
    # torchrun's healthy `[default] worker group successfully finished`: "default" holds "fault", not the word.
    line = ("INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting 300 "
            "seconds for other agents to finish.")
    assert learned.error_lines(line) == []
    assert learned.error_lines("Segmentation fault (core dumped)") == ["Segmentation fault (core dumped)"]
