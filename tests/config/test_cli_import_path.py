"""The `trainer` command's import path: our packages before the working folder's files, and a
user's file that shadows one of them named, with what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


CALLBACKS_PY = """\
import trainer

class Mine(trainer.Callback):
    pass
"""
EXPERIMENT = """\
model: {class_path: tests.helpers.reference.TinyNet}
data: {class_path: userdata.Points}
trainer: {max_steps: 1, logger: false, enable_checkpointing: false, enable_progress_bar: false}
callbacks:
  - {class_path: callbacks.EarlyStopping, init_args: {monitor: val/loss, check_on_train_epoch_end: false}}
"""
USERDATA_PY = """\
from torch.utils.data import DataLoader

from tests.helpers.reference import make_data

class Points:
    def train_dataloader(self):
        return DataLoader(make_data(8), batch_size=4)
"""


def test_the_command_reads_our_packages_before_the_working_folder(tmp_path: Path) -> None:
    """A user's callbacks.py beside the YAML no longer shadows the trainer's `callbacks` package under
    `python -m trainer`; a class_path read from the user's folder names its file; a class_path that
    asks the user's shadowed file for a class says to rename it."""
    (tmp_path / "callbacks.py").write_text(CALLBACKS_PY)
    (tmp_path / "userdata.py").write_text(USERDATA_PY)
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "trainer", "fit", "exp.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"class_path userdata.Points: imported from {tmp_path / 'userdata.py'}" in done.stderr
    (tmp_path / "mine.yaml").write_text(EXPERIMENT.replace("callbacks.EarlyStopping, init_args: {monitor: val/loss, check_on_train_epoch_end: false}", "callbacks.Mine"))
    done = subprocess.run([sys.executable, "-m", "trainer", "fit", "mine.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and f"Your {tmp_path / 'callbacks.py'} has the name of this trainer's own `callbacks` package" in done.stderr
