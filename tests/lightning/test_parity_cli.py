"""The classifier project's LightningCLI, under Lightning and under ours.

The same YAML trains the same final weights in two subprocesses (`python classifier.py fit
--config exp.yaml`); the CLI's `trainer_defaults`, `save_config_kwargs` and short callback
names in a config are taken as Lightning takes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_weights, lightning_source, load_project, project_path

pytest.importorskip("lightning")

REPO = Path(__file__).resolve().parents[2]


CLI_CONFIG = """\
seed_everything: 3
model:
  learning_rate: 0.01
data:
  batch_size: 16
trainer:
  max_epochs: 3
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
"""


@pytest.mark.slow
def test_lightning_cli_same_final_weights(tmp_path: Path) -> None:
    """`python classifier.py fit --config exp.yaml` in a subprocess, for each framework, with
    the same YAML: the final checkpoints hold the same weights, step and epoch."""
    (tmp_path / "exp.yaml").write_text(CLI_CONFIG)
    source = project_path("classifier").read_text()
    scripts = {"ours": source, "lightning": lightning_source(source)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    processes = {}
    for framework, text in scripts.items():
        (tmp_path / f"{framework}_classifier.py").write_text(text)
        command = [sys.executable, f"{framework}_classifier.py", "fit", "--config", "exp.yaml",
                   "--trainer.default_root_dir", str(tmp_path / framework)]
        processes[framework] = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True)
    for framework, process in processes.items():
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, f"{framework}:\n{output}"
    ours_file, = (tmp_path / "ours").rglob("last.ckpt")  # the Trainer's own last.ckpt
    theirs_file, = (tmp_path / "lightning" / "checkpoints").glob("*.ckpt")  # the default ModelCheckpoint's
    assert theirs_file.name == "epoch=2-step=18.ckpt"
    ours, theirs = (torch.load(f, weights_only=True) for f in (ours_file, theirs_file))
    assert_same_weights(ours["state_dict"], theirs["state_dict"])
    assert ours["global_step"] == theirs["global_step"] == 18
    lightning_own = {key: value for key, value in theirs["hyper_parameters"].items() if not key.startswith("_")}
    assert ours["hyper_parameters"] == lightning_own  # Lightning's CLI adds its "_instantiator"


def _cli(framework: str, tmp_path: Path, **kwargs: Any) -> Any:
    module = load_project("classifier", framework)
    args = {"trainer": {"default_root_dir": str(tmp_path), "logger": False}, **kwargs.pop("args", {})}
    return module.LightningCLI(module.LitClassifier, module.ShapesData, args=args, run=False, **kwargs)


@pytest.mark.parametrize("framework", ["lightning", "ours"])
def test_cli_trainer_defaults_take_callback_instances(framework: str, tmp_path: Path) -> None:
    module = load_project("classifier", framework)
    cli = module.LightningCLI(module.LitClassifier, module.ShapesData, run=False,
                              args={"trainer": {"default_root_dir": str(tmp_path), "logger": False}},
                              trainer_defaults={"callbacks": module.make_callbacks()})
    assert cli.trainer.early_stopping_callback is not None
    assert cli.trainer.checkpoint_callback.monitor == "val_loss"


@pytest.mark.parametrize("framework", ["lightning", "ours"])
def test_cli_takes_save_config_kwargs(framework: str, tmp_path: Path) -> None:
    cli = _cli(framework, tmp_path, save_config_kwargs={"overwrite": True})
    assert cli.model is not None


@pytest.mark.parametrize("framework", ["lightning", "ours"])
def test_cli_config_takes_short_callback_names(framework: str, tmp_path: Path) -> None:
    callback = {"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss", "patience": 1}}
    cli = _cli(framework, tmp_path, args={"trainer": {"default_root_dir": str(tmp_path), "logger": False,
                                                      "callbacks": [callback]}})
    assert cli.trainer.early_stopping_callback.patience == 1
