"""Data loading and process exits by meaning (issue 31): the words the libraries and launchers a training stack runs
print for these failures, each file below holding the message as that library's source raises or prints it (named
per case). diagnose_logs reads the files from disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, DiagnoseLogsResult, diagnose_logs

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 50, in <module>\n    for batch in loader:\n'


def diagnose(tmp_path: Path, text: str) -> DiagnoseLogsResult:
    (tmp_path / "job.log").write_text(text, encoding="utf-8")
    return anyio.run(diagnose_logs, DiagnoseLogsInput(paths=["job.log"]), ToolContext(roots=(tmp_path.resolve(),)))


@pytest.mark.parametrize(("text", "category", "facts"), [
    # torch/utils/data/_utils/collate.py: a sample the default collate cannot batch (a __getitem__ that returned None).
    (TRACEBACK + "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
     "found <class 'NoneType'>\n", "dataloader", {"sample_type": "NoneType"}),
    # Pillow's ImageFile.load on a truncated image.
    (TRACEBACK + "OSError: image file is truncated (5 bytes not processed)\n", "dataloader", {"exception": "OSError"}),
    # torch/utils/data/sampler.py's RandomSampler over an empty dataset.
    (TRACEBACK + "ValueError: num_samples should be a positive integer value, but got num_samples=0\n", "dataloader",
     {"num_samples": 0}),
    # torch.distributed.launch / DeepSpeed running the trainer with subprocess: a child killed, a child that failed.
    (TRACEBACK + "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=0']' "
     "died with <Signals.SIGKILL: 9>.\n", "process_exit", {"signal": "SIGKILL", "signal_number": 9}),
    (TRACEBACK + "subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', '--local_rank=1']' "
     "returned non-zero exit status 1.\n", "process_exit", {"exitcode": 1}),
    # DeepSpeed's launcher (deepspeed/launcher/launch.py's sigkill_handler).
    ("[2024-01-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1234\n"
     "[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
     "'--local_rank=0'] exits with return code = -9\n", "process_exit", {"exitcode": -9, "signal": "SIGKILL"}),
])
def test_the_family_is_named_from_the_libraries_words(tmp_path: Path, text: str, category: str,
                                                     facts: dict[str, Any]) -> None:
    result = diagnose(tmp_path, text)
    assert result.findings[0].category == category, [(f.category, f.rule) for f in result.findings]
    assert {k: result.findings[0].facts.get(k) for k in facts} == facts


def test_a_kubectl_block_is_the_containers_exit_not_a_compile_table(tmp_path: Path) -> None:
    # kubectl describe pod: `Reason:` and `Exit Code:` aligned in columns. Those two words also begin lines of
    # torch._dynamo.explain()'s break list and graph-break table, which only go on a Dynamo message above them.
    result = diagnose(tmp_path, "Containers:\n  trainer:\n    State:          Running\n    Last State:     Terminated\n"
                                "      Reason:       OOMKilled\n      Exit Code:    137\n")
    oom = [f for f in result.findings if f.rule == "k8s_oom_killed"]
    assert oom and oom[0].facts["exitcode"] == 137 and oom[0].severity == "crit"
    assert "compile" not in [f.category for f in result.findings]
