"""Monitored metrics checked together and early, with did-you-mean; EarlyStopping says it stopped."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
import torch

import callbacks
from tests.helpers.reference import TinyNet, loader, make_data
from trainer import MonitorError, Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a checkpointing run writes under ./runs


class Logs(TinyNet):
    """Logs train_loss per step and val_loss per validation; ReduceLROnPlateau on `plateau`."""

    def __init__(self, plateau: str | None = None) -> None:
        super().__init__()
        self.plateau = plateau
        self.batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batches += 1
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        if self.plateau is None:
            return optimizer
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": self.plateau}}


def fit(module: Logs, *cbs: Any, **kwargs: Any) -> Trainer:
    trainer = Trainer(callbacks=list(cbs), **{"max_epochs": 2, **QUIET, **kwargs})
    trainer.fit(module, loader(make_data(32)), loader(make_data(8, seed=3), shuffle=False))
    return trainer


def test_every_bad_monitor_is_reported_at_once_after_the_first_training_batch():
    module = Logs(plateau="val_lss")
    stopper, keeper = callbacks.EarlyStopping("val_los"), callbacks.ModelCheckpoint(monitor="train_los")
    with pytest.raises(MonitorError) as caught:
        fit(module, stopper, keeper, enable_checkpointing=True)
    message = str(caught.value)
    assert "3 monitored metrics are not logged" in message
    assert "EarlyStopping(monitor='val_los'): 'val_los' was never logged. Did you mean 'val_loss'?" in message
    assert "ModelCheckpoint(monitor='train_los'): 'train_los' was never logged. Did you mean 'train_loss'?" in message
    assert "ReduceLROnPlateau ('monitor': 'val_lss'): 'val_lss' was never logged. Did you mean 'val_loss'?" in message
    assert module.batches == 1  # not after an epoch (8 batches)


def test_without_a_sanity_check_the_first_validation_reports_them_all():
    module = Logs(plateau="val_lss")
    with pytest.raises(MonitorError) as caught:
        fit(module, callbacks.EarlyStopping("val_los"), num_sanity_val_steps=0)
    assert "2 monitored metrics are not logged" in str(caught.value)
    assert "'val_los'" in str(caught.value) and "'val_lss'" in str(caught.value)
    assert module.batches == 8  # the first validation is at the first epoch's end


class LogsAtEpochEnd(Logs):
    def on_train_epoch_end(self) -> None:
        self.log("epoch_score", float(self.current_epoch))


def test_a_monitor_logged_at_the_epochs_end_is_not_refused_early():
    stopper = callbacks.EarlyStopping("epoch_score", mode="max", check_on="train_epoch_end")
    trainer = fit(LogsAtEpochEnd(plateau="epoch_score"), stopper, callbacks.EarlyStopping("val_loss"))
    assert trainer.current_epoch == 2 and stopper.best == 1.0


def test_where_a_late_check_fails_every_monitor_missing_by_then_is_reported():
    module = LogsAtEpochEnd(plateau="epoch_scor")  # an epoch-interval scheduler: read after on_train_epoch_end
    with pytest.raises(MonitorError) as caught:
        fit(module, callbacks.EarlyStopping("epoch_scre", mode="max", check_on="train_epoch_end"))
    message = str(caught.value)
    assert "2 monitored metrics are not logged" in message and module.batches == 8
    assert "'epoch_scre' was never logged. Did you mean 'epoch_score'?" in message
    assert "'epoch_scor' was never logged. Did you mean 'epoch_score'?" in message


def test_non_strict_monitors_are_left_alone():
    trainer = fit(Logs(), callbacks.EarlyStopping("val_los", strict=False))
    assert trainer.current_epoch == 2


class Constant(Logs):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", 1.0)


def test_early_stopping_s_reason_counts_its_checks_and_names_min_delta(caplog):
    with caplog.at_level(logging.WARNING, logger="trainer.callbacks"):
        fit(Constant(), callbacks.EarlyStopping("val_loss", patience=2, min_delta=0.05), max_epochs=6)
    said = [r.getMessage() for r in caplog.records if "EarlyStopping: stopping" in r.getMessage()]
    assert said == ["EarlyStopping: stopping after epoch 2: val_loss did not improve on 1 by more than min_delta=0.05 "
                    "for 2 checks."]


def test_early_stopping_says_once_from_rank_zero_that_it_stopped(caplog):
    stopper = callbacks.EarlyStopping("val_loss", patience=1)
    with caplog.at_level(logging.WARNING, logger="trainer.callbacks"):
        trainer = fit(Constant(), stopper, max_epochs=6, min_epochs=4)  # the stop is held until epoch 4
    said = [r for r in caplog.records if "EarlyStopping: stopping" in r.getMessage()]
    assert trainer.current_epoch == 4 and len(said) == 1, caplog.text
    assert said[0].levelno == logging.WARNING  # shown without any logging set up
    assert said[0].getMessage() == "EarlyStopping: stopping after epoch 1: val_loss did not improve on 1 for 1 check."

    caplog.clear()
    other_rank = types.SimpleNamespace(current_epoch=3, is_global_zero=False, request_stop=lambda: None)
    stopper._said_stop = False
    stopper._stop(other_rank, "a reason")  # type: ignore[arg-type]
    assert stopper.stopped_epoch == 3 and caplog.records == []


def test_a_step_interval_scheduler_missing_its_monitor_says_the_nearest_name():
    class StepPlateau(Logs):
        def configure_optimizers(self) -> Any:
            config = super().configure_optimizers()
            config["lr_scheduler"]["interval"] = "step"
            return config

    module = StepPlateau(plateau="train_los")
    with pytest.raises(MonitorError, match="'train_los' was never logged. Did you mean 'train_loss'?") as caught:
        fit(module, callbacks.EarlyStopping("val_loss"))
    assert module.batches == 1 and "EarlyStopping" not in str(caught.value)
