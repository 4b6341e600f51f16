"""ckpt_path='last' and the model's class when the script is run as `python train.py`.

A script that defines its Module and trains it records the class as `__main__.Net`; a second
script that imports it (`from train import Net`, to evaluate or to continue) has `train.Net`.
Both are the same class: "last" finds that run. An evaluation that finds only other
experiments' runs says so (what differs, and how to evaluate one anyway), not that there is
no checkpoint, and not that a run starts from the beginning.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.helpers.checkpoints import shuffled
from tests.helpers.reference import TinyNet, make_data
from trainer import Trainer
from trainer.checkpoint import CheckpointError


def _net_class(module: str, name: str = "Net") -> type[TinyNet]:
    return type(name, (TinyNet,), {"__module__": module, "test_step": TinyNet.validation_step})


def _trainer(root: Path, **kwargs: object) -> Trainer:
    return Trainer(root_dir=root, logger=False, enable_progress_bar=False, device="cpu", **kwargs)  # type: ignore[arg-type]


def test_a_script_s_main_class_and_the_same_class_imported_are_one_experiment(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _trainer(tmp_path, max_epochs=1).fit(_net_class("__main__")(), shuffled(make_data()))
    with caplog.at_level(logging.INFO):
        _trainer(tmp_path).test(_net_class("train")(), shuffled(make_data()), ckpt_path="last", verbose=False)
    assert any("the weights of" in r.getMessage() and "version_0" in r.getMessage() for r in caplog.records), caplog.text
    resumed = _trainer(tmp_path, max_epochs=2)
    resumed.fit(_net_class("train")(), shuffled(make_data()), ckpt_path="last")
    assert resumed._run.checkpoints.last_path == tmp_path / "default" / "version_0" / "last.ckpt" and resumed.current_epoch == 2


def test_an_evaluation_finding_only_other_experiments_says_what_differs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _trainer(tmp_path, max_epochs=1).fit(_net_class("train", "Net")(), shuffled(make_data()))
    with caplog.at_level(logging.INFO), pytest.raises(CheckpointError) as caught:
        _trainer(tmp_path).test(_net_class("train", "Other")(), shuffled(make_data()), ckpt_path="last", verbose=False)
    message = str(caught.value)
    assert "no complete checkpoint" not in message and "model class 'train.Net' there, 'train.Other' here" in message
    assert "pass" in message and "path" in message
    assert "starts from the beginning" not in caplog.text
