"""The callbacks' Lightning attributes and options, each following the Lightning test it names:
EarlyStopping's `wait_count`/`best_score` with a metric logged in `on_train_epoch_end`,
ModelCheckpoint's version counter and `monitor=None`, LearningRateMonitor's tags per param
group, one progress bar callback and its `refresh_rate`, RichProgressBar without rich."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import callbacks
import trainer as L
from tests.lightning.test_lightning_flags import QUIET, Boring


def test_early_stopping_lightning_attributes_and_train_epoch_end_metric(tmp_path: Path) -> None:
    """Lightning: callbacks/test_early_stopping.py (wait_count, best_score; check_on_train_epoch_end=True
    with a metric logged in on_train_epoch_end, which the monitoring callbacks see)."""
    class EpochMetric(Boring):
        def on_train_epoch_end(self) -> None:
            self.log("train_score", 1.0)  # never improves after the first epoch

    stop = callbacks.EarlyStopping("train_score", mode="max", patience=2, check_on_train_epoch_end=True, log_rank_zero_only=True)
    assert stop.wait_count == 0 and float(stop.best_score) == -float("inf")
    trainer = L.Trainer(max_epochs=10, callbacks=[stop], root_dir=tmp_path, **QUIET)
    trainer.fit(EpochMetric(), DataLoader(torch.ones(4, 4), batch_size=2))
    assert trainer.current_epoch == 3 and stop.wait_count == 2 and float(stop.best_score) == 1.0


def test_model_checkpoint_lightning_options(tmp_path: Path) -> None:
    """Lightning: checkpointing/test_model_checkpoint.py::test_model_checkpoint_file_already_exists
    (-v1 with enable_version_counter) and the monitor=None case (best_model_score None)."""
    def fit(**options: Any) -> Any:
        mc = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", filename="model", **options)
        L.Trainer(max_epochs=2, callbacks=[mc], root_dir=tmp_path, **QUIET).fit(Boring(n=4))
        return mc

    first = fit(save_on_train_epoch_end=True)
    assert first.best_model_score is None and first.best_model_path.endswith("model.ckpt")
    second = fit()  # the name exists from the first run: versioned, never overwritten
    assert second.best_model_path.endswith("model-v1.ckpt")
    third = fit(enable_version_counter=False)
    assert third.best_model_path.endswith("model.ckpt")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["model-v1.ckpt", "model.ckpt"]


def test_learning_rate_monitor_lightning_tags(tmp_path: Path) -> None:
    """Lightning: callbacks/test_lr_monitor.py::test_lr_monitor_param_groups and ::test_lr_monitor_weight_decay
    (tags lr-Adam/pg1, lr-Adam/pg2, lr-SGD; -momentum, -weight_decay)."""
    class Groups(Boring):
        def configure_optimizers(self) -> Any:
            adam = torch.optim.Adam([{"params": [self.layer.weight]}, {"params": [self.layer.bias], "lr": 0.01}], lr=0.1,
                                    weight_decay=0.5)
            return {"optimizer": adam, "lr_scheduler": torch.optim.lr_scheduler.StepLR(adam, 1)}

    monitor = callbacks.LearningRateMonitor(log_momentum=True, log_weight_decay=True)
    L.Trainer(max_epochs=1, callbacks=[monitor], root_dir=tmp_path, **QUIET).fit(Groups(n=4))
    assert monitor.records == [{"epoch": 0.0, "lr-Adam/pg1": 0.1, "lr-Adam/pg1-momentum": 0.9, "lr-Adam/pg1-weight_decay": 0.5,
                                "lr-Adam/pg2": 0.01, "lr-Adam/pg2-momentum": 0.9, "lr-Adam/pg2-weight_decay": 0.5}]


def test_progress_bar_callbacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Lightning: trainer/connectors/test_callback_connector.py (one progress bar; not with
    enable_progress_bar=False); TQDMProgressBar(refresh_rate=0) draws nothing."""
    from callbacks.progress import TQDMProgressBar

    with pytest.raises(ValueError, match="enable_progress_bar=False but found TQDMProgressBar"):
        L.Trainer(callbacks=[TQDMProgressBar()], enable_progress_bar=False)
    with pytest.raises(ValueError, match="only one progress bar"):
        L.Trainer(callbacks=[TQDMProgressBar(), TQDMProgressBar(refresh_rate=2)])
    with pytest.raises(ValueError, match="refresh_rate"):
        TQDMProgressBar(refresh_rate=-1)
    quiet = {k: v for k, v in QUIET.items() if k != "enable_progress_bar"}
    capsys.readouterr()
    L.Trainer(max_epochs=1, callbacks=[TQDMProgressBar(refresh_rate=0)], root_dir=tmp_path, **quiet).fit(Boring(n=4))
    assert "Epoch 0" not in capsys.readouterr().err
    L.Trainer(max_epochs=1, callbacks=[TQDMProgressBar(refresh_rate=4)], root_dir=tmp_path, **quiet).fit(Boring(n=16))
    assert "8/8" in capsys.readouterr().err


def test_rich_progress_bar_without_rich_says_what_to_do() -> None:
    from callbacks.progress import RichProgressBar

    try:
        import rich  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install rich.*TQDMProgressBar"):
            RichProgressBar()
    else:
        assert RichProgressBar(refresh_rate=2).make_progress_bar() is not None
