"""nan_inf by meaning (issue 31): the finiteness checks of the libraries a training stack runs, in their own words,
none of them a loss printed as a metric. Each file below is the message text as the library's source raises or
prints it (named per case), in the traceback form Python prints; diagnose_logs reads the files from disk."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n    step(batch)\n'


def diagnose(tmp_path: Path, text: str) -> DiagnoseLogsResult:
    (tmp_path / "job.log").write_text(text, encoding="utf-8")
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["job.log"]), ToolContext(roots=(tmp_path.resolve(),)))


@pytest.mark.parametrize(("text", "message"), [
    # torch/distributions/distribution.py: a parameter outside its constraint, the offending tensor printed on the
    # lines below the message's colon (a NaN from the network that produced it).
    (TRACEBACK + "ValueError: Expected parameter loc (Tensor of shape (64, 2)) of distribution Normal(loc: "
     "torch.Size([64, 2]), scale: torch.Size([64, 2])) to satisfy the constraint Real(), but found invalid values:\n"
     "tensor([[nan, nan],\n        [nan, nan]], device='cuda:0', grad_fn=<AddmmBackward0>)\n",
     "Expected parameter loc"),
    # torch.multinomial (transformers' sampling): logits that overflowed in fp16.
    (TRACEBACK + "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n",
     "probability tensor contains"),
    # scikit-learn's input validation.
    (TRACEBACK + "ValueError: Input X contains NaN.\n", "Input X contains NaN."),
])
def test_an_exception_that_says_values_are_nan_is_nan_inf(tmp_path: Path, text: str, message: str) -> None:
    result = diagnose(tmp_path, text)
    assert [(f.category, f.severity) for f in result.findings] == [("nan_inf", "crit")]
    assert str(result.findings[0].facts["message"]).startswith(message)


def test_a_message_ending_in_a_colon_over_finite_values_is_not_nan(tmp_path: Path) -> None:
    # The same constraint check over a negative scale: not a NaN, so not nan_inf (it stays an unclassified error).
    result = diagnose(tmp_path, TRACEBACK + "ValueError: Expected parameter scale (Tensor of shape (4,)) of "
                      "distribution Normal() to satisfy the constraint GreaterThan(lower_bound=0.0), but found "
                      "invalid values:\ntensor([ 0.5000, -0.1000,  0.2000,  0.3000])\n")
    assert [f.category for f in result.findings] == ["unclassified_error"]


@pytest.mark.parametrize(("line", "where"), [
    # tensorboardX's x2num.check_nan, under Horovod's rank prefix.
    ("[1,0]<stdout>:Warning: NaN or Inf found in input tensor.\n", "input tensor"),
    # fairseq's NanDetector.
    ("2024-01-01 12:00:00 | WARNING | fairseq.nan_detector | NaN detected in output of "
     "decoder.layers.3.self_attn, shape: torch.Size([128, 8, 512]), forward\n", "decoder.layers.3.self_attn"),
])
def test_a_finiteness_check_that_found_nan_is_nan_inf_warn(tmp_path: Path, line: str, where: str) -> None:
    result = diagnose(tmp_path, line * 3)
    assert [(f.category, f.severity, f.rule) for f in result.findings] == [("nan_inf", "warn",
                                                                                  "nonfinite_found")]
    assert result.findings[0].facts["where"] == where


def test_a_number_before_the_loss_is_not_part_of_its_name(tmp_path: Path) -> None:
    result = diagnose(tmp_path, "epoch 3 iter 1200 lr 1.0e-4 loss nan acc 0.10\n")
    facts = result.findings[0].facts
    assert (facts["field"], facts["value"], facts["step"]) == ("loss", "nan", 1200)
