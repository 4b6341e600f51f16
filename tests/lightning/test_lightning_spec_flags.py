"""Trainer flags as Lightning's own tests specify them (tests_pytorch/trainer/flags/
test_min_max_epochs.py, test_limit_batches.py, test_fast_dev_run.py), each scenario run under
Lightning and here, with only the imports changed, and compared: where a run stops under
min/max epochs and steps, how many batches a float or int `limit_*_batches` takes in each stage,
and what `fast_dev_run` runs, changes and leaves unwritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import os
import torch
from trainer import Trainer
from callbacks import EarlyStopping, ModelCheckpoint
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False)


class Counting(BoringModel):
    def __init__(self):
        super().__init__()
        self.calls = {}

    def count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def training_step(self, batch, batch_idx):
        self.count("training_step")
        self.log("some_metric", torch.tensor(7.0))
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self):
        self.count("on_train_epoch_end")

    def validation_step(self, batch, batch_idx):
        self.count("validation_step")
        return super().validation_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        self.count("on_validation_epoch_end")

    def test_step(self, batch, batch_idx):
        self.count("test_step")
        return super().test_step(batch, batch_idx)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self.count("predict_step")
        return super().predict_step(batch, batch_idx, dataloader_idx)


def min_max(root, min_epochs, max_epochs, min_steps, max_steps):
    """Lightning: test_min_max_steps_epochs (max_steps without max_epochs; the limits together)."""
    torch.manual_seed(0)
    model = Counting()
    trainer = Trainer(default_root_dir=root, min_epochs=min_epochs, max_epochs=max_epochs, min_steps=min_steps,
                      max_steps=max_steps, limit_train_batches=8, limit_val_batches=2, logger=False,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return {"global_step": trainer.global_step, "current_epoch": trainer.current_epoch, "calls": model.calls,
            "weights": {k: v.tolist() for k, v in model.state_dict().items()}}


def num_batches(root, train, val):
    """Lightning: test_num_dataloader_batches (a limit above the loader's length takes the loader)."""
    torch.manual_seed(0)
    model = Counting()
    trainer = Trainer(limit_val_batches=val, limit_train_batches=train, max_epochs=1, default_root_dir=root,
                      logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return {"num_training_batches": trainer.num_training_batches, "num_val_batches": list(trainer.num_val_batches),
            "global_step": trainer.global_step, "calls": model.calls}


def eval_limits(root, stage, limit):
    """Lightning: test_eval_limit_batches (a float takes int(limit * len), an int that many)."""
    torch.manual_seed(0)
    model = Counting()
    flag = {"val": "limit_val_batches", "test": "limit_test_batches", "predict": "limit_predict_batches"}[stage]
    trainer = Trainer(default_root_dir=root, logger=False, enable_checkpointing=False, **QUIET, **{flag: limit})
    if stage == "val":
        trainer.validate(model)
        counted = list(trainer.num_val_batches)
    elif stage == "test":
        trainer.test(model)
        counted = list(trainer.num_test_batches)
    else:
        trainer.predict(model)
        counted = list(trainer.num_predict_batches)
    return counted, model.calls


def fast_dev_run(root, n, no_validation_step=False):
    """Lightning: test_callbacks_and_logger_not_called_with_fastdevrun (n batches of each stage,
    one epoch, no sanity check, no checkpoint written, no early stopping check)."""
    torch.manual_seed(0)
    model = Counting()
    if no_validation_step:
        model.validation_step = None
    checkpoint = ModelCheckpoint(dirpath=root / "ckpts")
    stopper = EarlyStopping(monitor="some_metric", stopping_threshold=100.0)
    trainer = Trainer(default_root_dir=root, fast_dev_run=n, val_check_interval=2, log_every_n_steps=1,
                      callbacks=[checkpoint, stopper], **QUIET)
    trainer.fit(model)
    trainer.test(model)
    return {
        "calls": model.calls, "max_steps": trainer.max_steps, "num_sanity_val_steps": trainer.num_sanity_val_steps,
        "max_epochs": trainer.max_epochs, "val_check_interval": trainer.val_check_interval,
        "check_val_every_n_epoch": trainer.check_val_every_n_epoch, "global_step": trainer.global_step,
        "checkpoint_dir": os.path.exists(root / "ckpts"), "stopped": stopper.stopped_epoch,
        "root_contents": sorted(os.listdir(root)) if os.path.isdir(root) else [],
        "checkpoint_callback": trainer.checkpoint_callback is checkpoint,
        "early_stopping_callback": trainer.early_stopping_callback is stopper,
    }
'''

SPEC = Spec(SOURCE, "spec_flags")


@pytest.mark.parametrize(("min_epochs", "max_epochs", "min_steps", "max_steps"), [
    (None, 3, None, -1), (None, None, None, 20), (None, 3, None, 20), (None, None, 10, 20), (1, 3, None, -1),
    (1, None, None, 20), (None, 3, 10, -1), (None, 2, 30, -1), (3, 1, None, -1),
])
def test_min_max_epochs_and_steps(min_epochs: Any, max_epochs: Any, min_steps: Any, max_steps: Any, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("min_max", tmp_path, min_epochs=min_epochs, max_epochs=max_epochs,
                                min_steps=min_steps, max_steps=max_steps)
    if max_steps is not None and max_steps > 0 and max_steps % 8:
        theirs["current_epoch"] -= 1  # max_steps inside an epoch: that epoch stays unfinished here (docs/lightning.md)
        theirs["calls"]["on_train_epoch_end"] -= 1
    assert ours == theirs


@pytest.mark.parametrize(("train", "val"), [(100, 100), (7, 7), (0.5, 0.25), (1.0, 0.1)])
def test_num_batches(train: Any, val: Any, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("num_batches", tmp_path, train=train, val=val)
    assert ours == theirs


@pytest.mark.parametrize("stage", ["val", "test", "predict"])
@pytest.mark.parametrize("limit", [0.1, 10, 0.33, 1.0, 100])
def test_eval_limits(stage: str, limit: Any, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("eval_limits", tmp_path, stage=stage, limit=limit)
    assert ours == theirs


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("no_validation_step", [False, True])
def test_fast_dev_run(n: int, no_validation_step: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("fast_dev_run", tmp_path, n=n, no_validation_step=no_validation_step)
    assert ours == theirs
