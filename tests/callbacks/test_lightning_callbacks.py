"""Callback options as Lightning defines them: ModelCheckpoint's names and
options, EarlyStopping's thresholds, LearningRateMonitor's interval. The Lightning
behaviour each test matches is named in its docstring (Lightning's
tests/tests_pytorch/checkpointing/test_model_checkpoint.py, callbacks/test_early_stopping.py,
callbacks/test_lr_monitor.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import callbacks
from tests.helpers.reference import TinyNet, make_data
from trainer import Trainer
from trainer.checkpoint import CheckpointError, load_checkpoint

QUIET = dict(logger=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class Scripted(TinyNet):
    """Logs `val_loss` from a script, one value per epoch."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__(dropout=0.0, lr=0.01)
        self.scores = scores

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.scores[self.trainer.current_epoch])


def fit(tmp_path: Path, scores: list[float], *cbs: Any, epochs: int | None = None, **kwargs: Any) -> Trainer:
    torch.manual_seed(0)
    trainer = Trainer(max_epochs=epochs or len(scores), callbacks=list(cbs), root_dir=tmp_path, **{**QUIET, **kwargs})
    trainer.fit(Scripted(scores), DataLoader(make_data(8), batch_size=4), DataLoader(make_data(4), batch_size=4))
    return trainer


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.ckpt"))


def test_filename_inserts_metric_names(tmp_path: Path):
    """Lightning: filename="{epoch}-{val_loss:.2f}" writes "epoch=0-val_loss=5.00.ckpt"."""
    mc = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", filename="{epoch}-{val_loss:.2f}", monitor="val_loss", save_top_k=-1)
    fit(tmp_path, [5.0, 4.0], mc)
    assert names(tmp_path / "ck") == ["epoch=0-val_loss=5.00.ckpt", "epoch=1-val_loss=4.00.ckpt"]
    plain = callbacks.ModelCheckpoint(dirpath=tmp_path / "plain", filename="{epoch}-{val_loss:.2f}", monitor="val_loss",
                                      auto_insert_metric_name=False)
    fit(tmp_path, [5.0], plain)
    assert names(tmp_path / "plain") == ["0-5.00.ckpt"]


def test_save_weights_only_files_evaluate_but_do_not_resume(tmp_path: Path):
    mc = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", save_weights_only=True)
    trainer = fit(tmp_path, [1.0, 2.0], mc)
    path = Path(mc.best_model_path)
    state = torch.load(path, weights_only=True)
    assert set(state) >= {"module", "weights_only"} and "optimizers" not in state and "rng" not in state
    model = TinyNet()
    model.load_state_dict(state["module"])
    assert Trainer(root_dir=tmp_path / "eval", **QUIET).validate(Scripted([3.0]), DataLoader(make_data(4), batch_size=4), ckpt_path=path)["val_loss"] == 3.0
    with pytest.raises(CheckpointError, match="weights only"):
        Trainer(max_epochs=3, root_dir=tmp_path / "resume", **QUIET).fit(Scripted([1.0] * 3), DataLoader(make_data(8), batch_size=4), ckpt_path=path)
    assert trainer.global_step == 4


def test_every_n_epochs_zero_never_saves_by_epoch(tmp_path: Path):
    mc = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_epochs=0, every_n_train_steps=3)
    fit(tmp_path, [1.0, 1.0], mc)
    assert names(tmp_path / "ck") == ["epoch=1-step=3.ckpt"]  # by steps only (the latest kept)


def test_fast_dev_run_with_a_model_checkpoint_writes_nothing(tmp_path: Path):
    mc = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=1, save_top_k=-1)
    fit(tmp_path, [1.0], mc, fast_dev_run=True)
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize(
    ("kwargs", "scores", "stopped_after"),
    [
        ({"stopping_threshold": 2.5}, [5.0, 3.0, 2.0, 1.0, 0.5], 3),  # below 2.5 at epoch 2: stop
        ({"divergence_threshold": 10.0}, [5.0, 11.0, 1.0, 1.0, 1.0], 2),  # above 10 at epoch 1: stop
        ({"patience": 1}, [5.0, 6.0, 7.0, 1.0, 1.0], 2),
    ],
    ids=["stopping_threshold", "divergence_threshold", "patience"],
)
def test_early_stopping_thresholds(tmp_path: Path, kwargs: dict[str, Any], scores: list[float], stopped_after: int):
    """Lightning's test_early_stopping.py: thresholds stop at once, whatever the patience."""
    trainer = fit(tmp_path, scores, callbacks.EarlyStopping("val_loss", **{"patience": 3, **kwargs}))
    assert trainer.current_epoch == stopped_after


def test_early_stopping_strict_false_and_check_on_train_epoch_end(tmp_path: Path, caplog):
    loose = callbacks.EarlyStopping("never_logged", strict=False)
    trainer = fit(tmp_path, [1.0, 1.0], loose)
    assert trainer.current_epoch == 2 and "strict=False" in caplog.text
    assert callbacks.EarlyStopping("x", check_on_train_epoch_end=True).check_on == "train_epoch_end"


def test_lr_monitor_logging_interval_step(tmp_path: Path):
    class Stepped(Scripted):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    monitor = callbacks.LearningRateMonitor()  # None: follows the scheduler's interval
    torch.manual_seed(0)
    Trainer(max_epochs=1, log_every_n_steps=1, callbacks=[monitor], root_dir=tmp_path, **QUIET).fit(
        Stepped([1.0]), DataLoader(make_data(12), batch_size=4)
    )
    assert [r["step"] for r in monitor.records] == [0.0, 1.0, 2.0]  # before each step, the rate it uses (Lightning)
    assert [r["lr-SGD"] for r in monitor.records] == pytest.approx([0.1, 0.05, 0.025])
    with pytest.raises(ValueError, match="logging_interval"):
        callbacks.LearningRateMonitor(logging_interval="batch")


def test_every_optimizers_learning_rate_is_logged(tmp_path):
    """Manual optimization with two optimizers: the automatic logging and LearningRateMonitor
    record the second one too (`train/lr-opt1-group0`; Lightning's tags `lr-Adam`, `lr-Adam-1`)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from callbacks import LearningRateMonitor
    from tests.helpers.gan import GAN, make_points, points_loader

    class TwoRates(GAN):
        def configure_optimizers(self):
            optimizers, schedulers = super().configure_optimizers()
            for group in optimizers[1].param_groups:
                group["lr"] = group["initial_lr"] = 1e-3
            return optimizers, schedulers

    torch.manual_seed(0)
    monitor = LearningRateMonitor(logging_interval="step")
    trainer = Trainer(max_epochs=1, root_dir=tmp_path, log_every_n_steps=2, enable_progress_bar=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, callbacks=[monitor])
    trainer.fit(TwoRates(), points_loader(make_points(16)))
    assert monitor.records[0]["lr-Adam"] == pytest.approx(2e-3)
    assert monitor.records[0]["lr-Adam-1"] == pytest.approx(1e-3)
    events = EventAccumulator(str(trainer.log_dir))
    events.Reload()
    assert events.Scalars("train/lr-group0")[0].value == pytest.approx(2e-3)
    assert events.Scalars("train/lr-opt1-group0")[0].value == pytest.approx(1e-3)
