"""EarlyStopping, LambdaCallback and LearningRateMonitor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import callbacks
from trainer import Callback, Module, Trainer


class Scripted(Module):
    """Logs `script[epoch]` as val/score (validation) and train/score (on_epoch in training)."""

    def __init__(self, script: list[float]) -> None:
        super().__init__()
        self.script = script
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.log("train/score", self.script[self.trainer.current_epoch], on_step=False, on_epoch=True)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        self.log("val/score", self.script[self.trainer.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 2, generator=g), torch.randn(8, 1, generator=g)), batch_size=4)


def fit(tmp_path: Path, script: list[float], *cbs: Callback, validate: bool = True, **kwargs) -> Trainer:
    args = dict(root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=len(script))
    args.update(kwargs)
    trainer = Trainer(callbacks=list(cbs), **args)
    trainer.fit(Scripted(script), loader(), loader() if validate else None)
    return trainer


# ------------------------------------------------------------------ EarlyStopping
def test_early_stopping_stops_at_the_expected_epoch(tmp_path: Path) -> None:
    # best 4.0 at epoch 1; epochs 2, 3, 4 do not improve -> stop after epoch 4.
    stopper = callbacks.EarlyStopping("val/score", patience=3)
    trainer = fit(tmp_path, [5.0, 4.0, 4.5, 4.2, 4.1, 1.0, 1.0, 1.0], stopper)
    assert trainer.current_epoch == 5 and trainer.global_step == 10
    assert (stopper.best, stopper.wait, stopper.stopped_epoch) == (4.0, 3, 4)


def test_early_stopping_min_delta_and_mode_max(tmp_path: Path) -> None:
    # Gains of 0.05 and 0.08 are below min_delta=0.1: they don't count; stop after epoch 2 (patience 2).
    stopper = callbacks.EarlyStopping("val/score", mode="max", patience=2, min_delta=0.1)
    trainer = fit(tmp_path, [1.0, 1.05, 1.08, 3.0, 4.0], stopper)
    assert trainer.current_epoch == 3 and stopper.best == 1.0
    # Without min_delta the same sequence improves every epoch and runs to the end.
    plain = callbacks.EarlyStopping("val/score", mode="max", patience=2)
    assert fit(tmp_path, [1.0, 1.05, 1.08, 3.0, 4.0], plain).current_epoch == 5


def test_early_stopping_on_train_epoch_end_without_validation(tmp_path: Path) -> None:
    stopper = callbacks.EarlyStopping("train/score", patience=1, check_on="train_epoch_end")
    trainer = fit(tmp_path, [3.0, 2.0, 2.5, 1.0], stopper, validate=False)
    assert trainer.current_epoch == 3


def test_early_stopping_stops_on_a_non_finite_value(tmp_path: Path) -> None:
    stopper = callbacks.EarlyStopping("val/score", patience=5)
    assert fit(tmp_path, [3.0, math.nan, 1.0, 1.0], stopper).current_epoch == 2


def test_early_stopping_counts_nan_as_no_improvement_without_check_finite(tmp_path: Path) -> None:
    stopper = callbacks.EarlyStopping("val/score", patience=2, check_finite=False)
    assert fit(tmp_path, [math.nan, math.nan, 1.0, 1.0], stopper).current_epoch == 2
    assert (stopper.best, stopper.wait, stopper.stopped_epoch) == (None, 2, 1)


def test_early_stopping_warns_when_no_validation_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stopper = callbacks.EarlyStopping("val/score", patience=1, check_on="validation_end")
    with caplog.at_level("WARNING", logger="trainer.callbacks"):
        fit(tmp_path, [1.0, 1.0, 1.0], stopper, validate=False)
    warnings = [r.getMessage() for r in caplog.records if "made no check" in r.getMessage()]
    assert warnings == ["EarlyStopping(monitor='val/score') made no check in epoch 0: no validation ran. "
                        "Pass a val_loader to fit, or use check_on='train_epoch_end'."]


def test_early_stopping_names_the_logged_metrics(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"(?s)monitor='val/acc'.*Did you mean 'val/score'.*Logged so far: .*val/score"):
        fit(tmp_path, [1.0, 1.0], callbacks.EarlyStopping("val/acc"))


def test_early_stopping_ignores_validate_outside_fit(tmp_path: Path) -> None:
    stopper = callbacks.EarlyStopping("val/score", patience=1)
    trainer = Trainer(callbacks=[stopper], logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.validate(Scripted([1.0]), loader())
    assert (stopper.wait, stopper.best) == (0, None) and not trainer.should_stop


def test_early_stopping_state_is_in_the_checkpoint(tmp_path: Path) -> None:
    stopper = callbacks.EarlyStopping("val/score", patience=5)
    trainer = fit(tmp_path, [5.0, 4.0, 4.5], stopper)
    path = trainer.save_checkpoint(tmp_path / "x.ckpt")
    saved = torch.load(path, weights_only=True)["callbacks"]["EarlyStopping{'monitor': 'val/score', 'mode': 'min'}"]
    assert saved == {"wait": 1, "best": 4.0, "stopped_epoch": 0,  # Lightning's 0 while it has not stopped
                     "stopping_reason": 0, "stopping_reason_message": None}
    # Resuming restores the count: one more non-improving epoch (patience 2) stops the run.
    resumed = callbacks.EarlyStopping("val/score", patience=2)
    again = Trainer(callbacks=[resumed], logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=6)
    again.fit(Scripted([5.0, 4.0, 4.5, 4.4, 1.0, 1.0]), loader(), loader(), ckpt_path=path)
    assert again.current_epoch == 4 and resumed.stopped_epoch == 3


def test_early_stopping_state_under_the_key_of_earlier_versions_loads(tmp_path: Path) -> None:
    """A checkpoint written before the key became Lightning's (`EarlyStopping[<monitor>]`) still
    restores the wait count and the best value."""
    trainer = fit(tmp_path, [5.0, 4.0, 4.5], callbacks.EarlyStopping("val/score", patience=5))
    path = trainer.save_checkpoint(tmp_path / "x.ckpt")
    held = torch.load(path, weights_only=True)
    state = held["callbacks"].pop("EarlyStopping{'monitor': 'val/score', 'mode': 'min'}")
    held["callbacks"]["EarlyStopping[val/score]"] = {k: state[k] for k in ("wait", "best", "stopped_epoch")}
    old = tmp_path / "old.ckpt"
    torch.save(held, old)
    resumed = callbacks.EarlyStopping("val/score", patience=2)
    again = Trainer(callbacks=[resumed], logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=6)
    again.fit(Scripted([5.0, 4.0, 4.5, 4.4, 1.0, 1.0]), loader(), loader(), ckpt_path=old)
    assert again.current_epoch == 4 and resumed.stopped_epoch == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"monitor": ""}, r"monitor=.*Received: ''"),
        ({"monitor": "m", "mode": "lowest"}, r"mode=.*expected 'min' or 'max'. Received: 'lowest'"),
        ({"monitor": "m", "patience": -1}, r"patience=.*Received: -1"),
        ({"monitor": "m", "min_delta": -0.1}, r"min_delta=.*Received: -0.1"),
        ({"monitor": "m", "check_on": "epoch"}, r"check_on=.*Received: 'epoch'"),
    ],
)
def test_early_stopping_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        callbacks.EarlyStopping(**kwargs)


# ------------------------------------------------------------------ LambdaCallback
def test_lambda_callback_calls_only_the_given_hooks(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []
    cb = callbacks.LambdaCallback(
        on_train_epoch_end=lambda trainer, module: calls.append(("epoch", trainer.current_epoch)),
        on_train_step_end=lambda trainer, module, stepped: calls.append(("step", trainer.global_step)),
    )
    other = callbacks.LambdaCallback(on_fit_end=lambda trainer, module: calls.append(("end", -1)))
    fit(tmp_path, [1.0, 1.0], cb, other)
    assert calls == [("step", 1), ("step", 2), ("epoch", 0), ("step", 3), ("step", 4), ("epoch", 1), ("end", -1)]
    assert type(cb).on_train_batch_end is Callback.on_train_batch_end  # not overridden: never dispatched
    assert type(other).on_train_epoch_end is Callback.on_train_epoch_end
    assert isinstance(cb, callbacks.LambdaCallback)


def test_lambda_callback_rejects_unknown_hooks() -> None:
    with pytest.raises(ValueError, match=r"on_epoch_end=.*unknown hook. Did you mean 'on_\w+_epoch_end'\?"):
        callbacks.LambdaCallback(on_epoch_end=lambda trainer, module: None)
    with pytest.raises(ValueError, match=r"on_fit_end=.*expected a callable. Received: 3 of type int"):
        callbacks.LambdaCallback(on_fit_end=3)


# ------------------------------------------------------------------ LearningRateMonitor
def test_learning_rate_monitor_records_each_epoch(tmp_path: Path) -> None:
    class Decaying(Scripted):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monitor = callbacks.LearningRateMonitor(log_momentum=True)
    trainer = Trainer(callbacks=[monitor], root_dir=tmp_path, enable_checkpointing=False, enable_progress_bar=False, max_epochs=3)
    trainer.fit(Decaying([1.0] * 3), loader())
    assert monitor.records == [  # Lightning's tags (its test_lr_monitor.py: lr-SGD, lr-SGD-momentum)
        {"epoch": 0.0, "lr-SGD": 0.1, "lr-SGD-momentum": 0.9},
        {"epoch": 1.0, "lr-SGD": 0.05, "lr-SGD-momentum": 0.9},
        {"epoch": 2.0, "lr-SGD": 0.025, "lr-SGD-momentum": 0.9},
    ]
    assert monitor.lrs == {"lr-SGD": [0.1, 0.05, 0.025]}
    events = EventAccumulator(str(trainer.log_dir))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("lr-SGD")] == [(0, 0.1), (2, 0.05), (4, 0.025)]


def test_a_monitor_never_logged_is_a_clean_error_after_last_ckpt_was_written(tmp_path):
    """Found at the first validation end; the finished epoch is kept in last.ckpt."""
    import callbacks as cbs
    from trainer import MonitorError
    from trainer.checkpoint import load_checkpoint

    from tests.helpers.reference import loader as batches
    from tests.helpers.reference import make_data, make_model

    stopper = cbs.EarlyStopping("val/missing")
    trainer = Trainer(max_epochs=3, num_sanity_val_steps=0, callbacks=[stopper], root_dir=tmp_path, logger=False,
                      enable_progress_bar=False)
    with pytest.raises(MonitorError, match="val/missing") as caught:
        trainer.fit(make_model(), batches(make_data()), val_loader=batches(make_data(8)))
    assert isinstance(caught.value, ValueError) and "'val/missing'" in str(caught.value)
    saved = load_checkpoint(trainer.log_dir / "last.ckpt")
    assert saved["loop"]["global_step"] == 10  # the epoch's 10 steps are not lost
