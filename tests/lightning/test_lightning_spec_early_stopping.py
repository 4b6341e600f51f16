"""EarlyStopping as Lightning's own tests specify it (tests_pytorch/callbacks/test_early_stopping.py),
each scenario run under Lightning and here, with only the imports changed, and compared.

The scenarios take Lightning's: per-epoch values logged in `on_validation_epoch_end` or
`on_train_epoch_end`, patience, thresholds, non-finite values, `min_epochs`/`min_steps` holding a
stop, several EarlyStopping callbacks, when the check runs (`val_check_interval`,
`check_val_every_n_epoch`), the stopping reason, and what a checkpoint holds of it. The
`current_epoch` after a stop is Lightning's here: these stops are at an epoch's end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import math
import torch
from trainer import Trainer
from callbacks import EarlyStopping, ModelCheckpoint
from trainer.demos.boring_classes import BoringModel

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False)


def summary(trainer, stoppers):
    return {
        "current_epoch": trainer.current_epoch, "global_step": trainer.global_step,
        "should_stop": bool(trainer.should_stop),
        "stoppers": [(s.stopped_epoch, s.wait_count, float(s.best_score)) for s in stoppers],
    }


def patience(root, losses, patience, on_train=False, no_validation=False):
    """Lightning: test_early_stopping_patience, test_early_stopping_patience_train."""
    values = torch.tensor(losses)

    class Model(BoringModel):
        def on_validation_epoch_end(self):
            if not on_train:
                self.log("loss", values[self.current_epoch])

        def on_train_epoch_end(self):
            if on_train:
                self.log("loss", values[self.current_epoch])

    model = Model()
    if no_validation:
        model.validation_step = None
    stopper = EarlyStopping(monitor="loss", patience=patience, check_on_train_epoch_end=True if on_train else None)
    trainer = Trainer(default_root_dir=root, callbacks=[stopper], num_sanity_val_steps=0, max_epochs=10,
                      limit_train_batches=2, limit_val_batches=2, enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    return summary(trainer, [stopper])


def thresholds(root, losses, mode="min", float64=False, **options):
    """Lightning: test_early_stopping_thresholds, test_early_stopping_on_non_finite_monitor; with
    values near a threshold or a min_delta, compared as Lightning compares them (a float64
    value logged keeps its precision)."""

    class Model(BoringModel):
        def on_validation_epoch_end(self):
            value = losses[self.current_epoch]
            self.log("abc", torch.tensor(value, dtype=torch.float64) if float64 else value)

    stopper = EarlyStopping(monitor="abc", mode=mode, **options)
    trainer = Trainer(default_root_dir=root, callbacks=[stopper], limit_train_batches=2, limit_val_batches=2,
                      max_epochs=len(losses), enable_checkpointing=False, **QUIET)
    trainer.fit(Model())
    return {**summary(trainer, [stopper]), "reason": stopper.stopping_reason.name,
            "value": repr(float(trainer.callback_metrics["abc"]))}


def min_epochs_min_steps(root, limit_train_batches, min_epochs, min_steps):
    """Lightning: test_min_epochs_min_steps_global_step (a stop asked for at every check, held
    until min_epochs and min_steps are reached and the epoch is over)."""

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("foo", batch_idx)
            return super().training_step(batch, batch_idx)

    stopper = EarlyStopping("foo", stopping_threshold=100)
    trainer = Trainer(default_root_dir=root, callbacks=stopper, limit_val_batches=0,
                      limit_train_batches=limit_train_batches, min_epochs=min_epochs, min_steps=min_steps,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(Model())
    return summary(trainer, [stopper])


def several(root, order, on_train):
    """Lightning: test_multiple_early_stopping_callbacks (any of them stops the run)."""

    class Model(BoringModel):
        def _epoch_end(self):
            self.log("abc", torch.tensor([8, 4, 2, 3, 4, 5, 8, 10][self.current_epoch]))
            self.log("cba", torch.tensor(0))

        def on_train_epoch_end(self):
            if on_train:
                self._epoch_end()

        def on_validation_epoch_end(self):
            if not on_train:
                self._epoch_end()

    check = {"check_on_train_epoch_end": True} if on_train else {}
    stoppers = [EarlyStopping("abc", **check), EarlyStopping("cba", patience=3, **check)]
    if order == "reversed":
        stoppers.reverse()
    trainer = Trainer(default_root_dir=root, callbacks=stoppers, limit_train_batches=2, limit_val_batches=2,
                      max_epochs=20, enable_checkpointing=False, **QUIET)
    trainer.fit(Model())
    return summary(trainer, stoppers)


def when_checked(root, **flags):
    """Lightning: test_check_on_train_epoch_end_smart_handling (the check runs after each
    validation when it is not once at every epoch's end); a constant value with patience=0
    stops at the second check."""
    checks = []

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("foo", 1.0)
            return super().validation_step(batch, batch_idx)

    class Stopper(EarlyStopping):
        def on_validation_end(self, trainer, module):
            checks.append((trainer.current_epoch, trainer.global_step, self.wait_count))
            super().on_validation_end(trainer, module)

    stopper = Stopper(monitor="foo", patience=0)
    trainer = Trainer(default_root_dir=root, limit_val_batches=1, callbacks=stopper, num_sanity_val_steps=0,
                      enable_checkpointing=False, **QUIET, **flags)
    trainer.fit(Model())
    return {**summary(trainer, [stopper]), "checks": checks}


def reasons(root, losses, epochs, **options):
    """Lightning: test_early_stopping_reasons (the reason, a message that says it, stopped_epoch)."""

    class Model(BoringModel):
        def on_validation_epoch_end(self):
            self.log("val_loss", losses[min(self.current_epoch, len(losses) - 1)])

    stopper = EarlyStopping(monitor="val_loss", **options)
    trainer = Trainer(default_root_dir=root, callbacks=[stopper], max_epochs=epochs, limit_train_batches=2,
                      limit_val_batches=2, enable_checkpointing=False, **QUIET)
    trainer.fit(Model())
    message = stopper.stopping_reason_message
    return {**summary(trainer, [stopper]), "reason": stopper.stopping_reason.name, "has_message": message is not None}


def reason_state(root):
    """Lightning: test_early_stopping_reasons, state persistence: the reason comes back from a state_dict."""
    stopper = EarlyStopping(monitor="val_loss", patience=3)
    stopper.stopping_reason = type(stopper.stopping_reason).PATIENCE_EXHAUSTED
    stopper.stopping_reason_message = "Test message"
    again = EarlyStopping(monitor="val_loss", patience=3)
    again.load_state_dict(stopper.state_dict())
    return again.stopping_reason.name, again.stopping_reason_message, stopper.state_key


def resume_state(root):
    """Lightning: test_resume_early_stopping_from_checkpoint (the state saved in the best
    checkpoint is the one the callback had at that epoch's end, and a new run starts from it)."""
    saved, started = [], []

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("train_loss", out["loss"], on_epoch=True, on_step=False)
            return out

    class Stopper(EarlyStopping):
        def on_train_start(self, trainer, module):
            started.append((self.wait_count, float(self.best_score), self.stopped_epoch))

        def on_train_epoch_end(self, trainer, module):
            super().on_train_epoch_end(trainer, module)
            saved.append((self.wait_count, float(self.best_score), self.stopped_epoch))

    torch.manual_seed(42)
    model = Model()
    checkpoint = ModelCheckpoint(dirpath=root, monitor="train_loss", save_top_k=1)
    stopper = Stopper(monitor="train_loss")
    trainer = Trainer(default_root_dir=root, callbacks=[stopper, checkpoint], num_sanity_val_steps=0, max_epochs=4,
                      limit_train_batches=3, limit_val_batches=1, **QUIET)
    trainer.fit(model)
    state = torch.load(checkpoint.best_model_path, weights_only=True)
    again = Stopper(monitor="train_loss")
    Trainer(default_root_dir=root, callbacks=[again], max_epochs=state["epoch"] + 2, limit_train_batches=1,
            limit_val_batches=0, **QUIET).fit(model, ckpt_path=checkpoint.best_model_path)
    return {"saved": saved[:4], "epoch": state["epoch"], "started": started}


def fast_dev_run(root):
    """Lightning's _run_early_stopping_check: no check under fast_dev_run."""

    class Model(BoringModel):
        def on_validation_epoch_end(self):
            self.log("val_loss", 1.0)

    stopper = EarlyStopping(monitor="val_loss", stopping_threshold=5.0)
    trainer = Trainer(default_root_dir=root, callbacks=[stopper], fast_dev_run=2, **QUIET)
    trainer.fit(Model())
    return {**summary(trainer, [stopper]), "reason": stopper.stopping_reason.name}
'''

SPEC = Spec(SOURCE, "spec_early_stopping")


@pytest.mark.parametrize(("losses", "patience"), [([6, 5, 5, 5, 5, 5], 3), ([6, 5, 4, 4, 3, 3], 1), ([6, 5, 6, 5, 5, 5], 3)])
@pytest.mark.parametrize("where", ["validation", "train", "train_no_validation"])
def test_patience(losses: list[int], patience: int, where: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("patience", tmp_path, losses=losses, patience=patience, on_train=where != "validation",
                                no_validation=where == "train_no_validation")
    assert ours == theirs


THRESHOLDS = {
    "none": dict(losses=[8, 4, 2, 3, 4, 5, 8, 10]),
    "stopping": dict(losses=[9, 8, 7, 6, 5, 6, 4, 3, 2, 1], stopping_threshold=2.9),
    "divergence": dict(losses=[9, 4, 2, 16, 32, 64], divergence_threshold=15.9),
    "inf": dict(losses=[4, 3, float("inf"), 2, 1], check_finite=True),
    "nan": dict(losses=[4, 3, float("nan"), 2, 1], check_finite=True),
    "nan_unchecked": dict(losses=[4, 3, float("nan"), 2, 1, 1, 1], check_finite=False, patience=2),
    # float32 values right at a threshold or min_delta: compared in the logged value's precision
    "stopping_at_float32": dict(losses=[0.9, 0.8, 0.7, 0.7, 0.6, 0.5], stopping_threshold=0.7, patience=5),
    "divergence_at_float32": dict(losses=[0.6, 0.5, 0.4, 0.3, 0.3, 0.3], mode="max", divergence_threshold=0.3,
                                  patience=9),
    "min_delta_float32": dict(losses=[1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4], min_delta=0.1, patience=1),
    "stopping_float64": dict(losses=[0.9, 0.8, 0.7, 0.7, 0.69, 0.5], stopping_threshold=0.7, patience=5, float64=True),
    "min_delta_float64": dict(losses=[1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4], min_delta=0.1, patience=1, float64=True),
    "min_delta_max": dict(losses=[0.1, 0.2, 0.3, 0.35, 0.5, 0.6], mode="max", min_delta=0.1, patience=1),
}


@pytest.mark.parametrize("case", list(THRESHOLDS))
def test_thresholds(case: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("thresholds", tmp_path, **THRESHOLDS[case])
    assert ours == theirs


@pytest.mark.parametrize(("limit_train_batches", "min_epochs", "min_steps"), [
    (3, 0, 10), (5, 0, 10), (3, 2, 0), (5, 2, 0), (3, 1, 10), (5, 1, 10), (3, 3, 10), (5, 3, 10),
])
def test_min_epochs_min_steps(limit_train_batches: int, min_epochs: int, min_steps: int, tmp_path: Path) -> None:
    """Without max_epochs/max_steps: Lightning's default is 1000 epochs, ours one epoch, or as many
    as min_epochs/min_steps ask for; either way the held stop ends the run at Lightning's step.
    Where min_steps ends the run inside an epoch, that epoch stays unfinished here (a deliberate
    difference, docs/lightning.md): current_epoch and the last check's epoch are one lower."""
    ours, theirs = SPEC.compare("min_epochs_min_steps", tmp_path, limit_train_batches=limit_train_batches,
                                min_epochs=min_epochs, min_steps=min_steps)
    cut = theirs["global_step"] % limit_train_batches != 0
    if cut:
        theirs["current_epoch"] -= 1
        theirs["stoppers"] = [(epoch - 1, *rest) for epoch, *rest in theirs["stoppers"]]
    assert ours == theirs


@pytest.mark.parametrize("order", ["given", "reversed"])
@pytest.mark.parametrize("on_train", [False, True])
def test_several_stoppers(order: str, on_train: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("several", tmp_path, order=order, on_train=on_train)
    assert ours == theirs


@pytest.mark.parametrize("flags", [
    {"val_check_interval": 0.3, "limit_train_batches": 10, "max_epochs": 10},
    {"check_val_every_n_epoch": 2, "max_epochs": 5, "limit_train_batches": 2},
], ids=["val_check_interval", "check_val_every_n_epoch"])
def test_when_checked(flags: dict[str, Any], tmp_path: Path) -> None:
    """The checks run at on_validation_end, at Lightning's steps. A stop at a mid-epoch
    validation leaves the epoch unfinished here (docs/lightning.md): current_epoch one lower."""
    ours, theirs = SPEC.compare("when_checked", tmp_path, **flags)
    if "val_check_interval" in flags:
        theirs["current_epoch"] -= 1
    assert ours == theirs


REASONS = {
    "patience": dict(losses=[10.0], epochs=10, patience=2),
    "stopping_threshold": dict(losses=[5.0, 3.0, 1.0, 0.5, 0.1], epochs=10, stopping_threshold=0.6),
    "divergence_threshold": dict(losses=[1.0, 2.0, 5.0, 10.0, 15.0], epochs=10, divergence_threshold=8.0),
    "non_finite": dict(losses=[1.0, 0.5, float("nan")], epochs=10),
    "not_stopped": dict(losses=[5.0, 4.0, 3.0, 2.0, 1.0], epochs=3, patience=3),
}


@pytest.mark.parametrize("case", list(REASONS))
def test_reasons(case: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reasons", tmp_path, **REASONS[case])
    assert ours == theirs


def test_reason_in_state(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reason_state", tmp_path)
    assert ours[:2] == theirs[:2] == ("PATIENCE_EXHAUSTED", "Test message")


def test_resume_state(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("resume_state", tmp_path)
    assert ours == theirs


def test_fast_dev_run_makes_no_check(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("fast_dev_run", tmp_path)
    assert ours == theirs
