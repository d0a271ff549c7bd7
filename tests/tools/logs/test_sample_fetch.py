"""A sample that cannot be read with num_workers=0 (issue 31): the main process raises the dataset's own exception,
with no "Caught X in DataLoader worker process N" wrapper, and its traceback runs through the loader's fetch
(torch/utils/data/_utils/fetch.py). It is the same failure as a worker's, so it is judged as one: a file that cannot be
read is dataloader; a programming error in __getitem__ (KeyError) stays unclassified, with its location.

Each log is the real stderr of a real PyTorch DataLoader run here (CPU), not a written excerpt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tools.core.context import ToolContext
from tools.logs.diagnose import DiagnoseLogsInput, diagnose_logs

_TRAIN = '''
import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        if {fails!r} == "missing_file":
            with open(f"/nonexistent/images/{{index:05d}}.jpg", "rb") as handle:
                return torch.tensor(list(handle.read(4)))
        return {{"a": 1}}["label"]


for step, batch in enumerate(DataLoader(Images(), batch_size=2, num_workers=0)):
    print(f"step {{step}} loss 0.5")
'''


def _run_training(folder: Path, fails: str) -> Path:
    script = folder / "train.py"
    script.write_text(_TRAIN.format(fails=fails))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    log = folder / "train.log"
    log.write_text(done.stdout + done.stderr)
    return log


def _findings(log: Path) -> list[tuple[str, str, dict[str, object]]]:
    result = anyio.run(diagnose_logs, DiagnoseLogsInput(paths=[log.name]), ToolContext(roots=(log.parent.resolve(),)))
    return [(f.category, f.severity, dict(f.facts)) for f in result.findings if f.severity != "info"]


def test_unreadable_sample_in_the_main_process_is_dataloader(tmp_path: Path) -> None:
    log = _run_training(tmp_path, "missing_file")
    assert "in DataLoader worker process" not in log.read_text()  # no worker wrapper: the main process raised it
    found = _findings(log)
    assert [(c, s) for c, s, _ in found] == [("dataloader", "crit")], found
    facts = found[0][2]
    assert facts["exception"] == "FileNotFoundError"
    assert str(facts["location"]).endswith("train.py:12")
    assert "dataloader_worker" not in facts  # no worker was involved


@pytest.mark.parametrize("fails", ["key_error"])
def test_a_bug_in_getitem_is_the_input_pipeline_with_its_exception(tmp_path: Path, fails: str) -> None:
    # Issue 31 (2026-12-03): a KeyError in the dataset's __getitem__ is what the job died of while loading a sample:
    # dataloader, with the exception and the dataset's line that name the bug.
    found = _findings(_run_training(tmp_path, fails))
    assert [(c, s) for c, s, _ in found] == [("dataloader", "crit")], found
    assert found[0][2]["exception"] == "KeyError"
    assert str(found[0][2]["location"]).endswith("train.py:14")
