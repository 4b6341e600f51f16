"""A Lightning project runs with only its imports changed: Lightning's names (`import trainer as L`,
`callbacks.*`, `trainer.utilities`), the LightningModule's attributes, loaders on the module,
evaluation without a model, `load_from_checkpoint`, TensorBoardLogger's arguments. Where a test
states Lightning's behaviour it names the Lightning test (tests/tests_pytorch/...) or source it
follows."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import callbacks
import trainer as L
import trainer as pl
from tests.lightning.test_lightning_flags import QUIET, Boring
from trainer.trainer.states import TrainerFn


def test_lightning_names_exist() -> None:
    from callbacks import (Callback, EarlyStopping, LearningRateMonitor, ModelCheckpoint, ModelSummary,  # noqa: F401
                           RichProgressBar, TQDMProgressBar)
    from trainer import LightningDataModule, LightningModule, Trainer, seed_everything  # noqa: F401
    from trainer.utilities import rank_zero_info, rank_zero_only, rank_zero_warn  # noqa: F401

    assert L.LightningModule is L.Module and pl.LightningDataModule is L.DataModule and callbacks.Callback is L.Callback
    assert L.seed_everything(7) == 7 and os.environ["PL_GLOBAL_SEED"] == "7"
    a = torch.rand(3)
    L.seed_everything(7)
    assert torch.equal(a, torch.rand(3))
    with pytest.raises(ValueError, match="seed_everything"):
        L.seed_everything(-1)


def test_rank_zero_only_follows_its_rank(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Lightning: `rank_zero_only.rank` (set at import, tests/lightning/test_lightning_names.py)
    decides; the environment is read again only when it is set to None."""
    from trainer.utilities import rank_zero_info, rank_zero_only, rank_zero_warn

    calls: list[int] = []
    record = rank_zero_only(calls.append)
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    record(1)
    monkeypatch.setenv("RANK", "1")  # the rank was fixed at import: the environment no longer counts
    record(2)
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    record(3)
    with caplog.at_level(logging.INFO, logger="trainer"):
        rank_zero_info("not from rank 1")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rank_zero_warn("not from rank 1 either")
    assert calls == [1, 2] and "rank 1" not in caplog.text and not caught
    monkeypatch.setattr(rank_zero_only, "rank", None)  # None: read the environment at each call
    record(4)
    monkeypatch.setenv("RANK", "0")
    record(5)
    assert calls == [1, 2, 5]


def test_module_attributes_inside_and_outside_a_trainer(tmp_path: Path) -> None:
    """Lightning: core/module.py (global_step/current_epoch 0, logger None, loggers [] without a Trainer)."""
    seen: list[tuple[int, int, Any, int, bool]] = []

    class Watch(Boring):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen.append((self.global_step, self.current_epoch, type(self.logger.experiment).__name__, len(self.loggers), self.on_gpu))

    module = Watch()
    assert (module.global_step, module.current_epoch, module.logger, module.loggers, module.on_gpu) == (0, 0, None, [], False)
    assert module.device == torch.device("cpu")
    trainer = L.Trainer(max_epochs=2, limit_train_batches=2, root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module)
    assert seen == [(1, 0, "SummaryWriter", 1, False), (2, 0, "SummaryWriter", 1, False),
                    (3, 1, "SummaryWriter", 1, False), (4, 1, "SummaryWriter", 1, False)]
    assert module.trainer is trainer and trainer.default_root_dir == tmp_path


def test_fit_takes_the_modules_own_loaders_after_setup(tmp_path: Path) -> None:
    """Lightning's bug-report model: train/val loaders on the module, datasets built in setup()."""
    order: list[str] = []

    class Later(Boring):
        def setup(self, stage: str) -> None:
            order.append(f"setup {stage}")
            self.data = torch.ones(6, 4)

        def train_dataloader(self) -> DataLoader:
            order.append("train_dataloader")
            return DataLoader(self.data, batch_size=2)

        def val_dataloader(self) -> DataLoader:
            order.append("val_dataloader")
            return DataLoader(self.data, batch_size=3)

    trainer = L.Trainer(max_epochs=1, root_dir=tmp_path, num_sanity_val_steps=0, **QUIET)
    trainer.fit(Later())
    # `stage` is Lightning's TrainerFn member, formatted as Python formats a str enum
    assert order == [f"setup {TrainerFn.FITTING}", "train_dataloader", "val_dataloader"] and trainer.global_step == 3
    assert trainer.callback_metrics["val_loss"] == pytest.approx(trainer.validate(verbose=False)["val_loss"])
    with pytest.raises(ValueError, match="train_dataloader\\(\\) method on"):
        L.Trainer(**QUIET).fit(L.Module())


def test_evaluation_without_a_model_results_and_the_printed_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Lightning: trainer.test(ckpt_path="best") after fit, `[0]["test_loss"]`, the printed table
    (loops/evaluation_loop.py::_print_results), verbose=False prints nothing, return_predictions=False."""
    with pytest.raises(ValueError, match=r"validate\(\) expected a model"):
        L.Trainer(**QUIET).validate()
    trainer = L.Trainer(max_epochs=1, root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False, logger=False)
    module = Boring()
    trainer.fit(module)
    capsys.readouterr()
    results = trainer.test(ckpt_path="best")  # no ModelCheckpoint: this run's last.ckpt, Lightning's default "best"
    printed = capsys.readouterr().out
    assert "Test metric" in printed and "DataLoader 0" in printed and "test_loss" in printed
    assert results[0]["test_loss"] == results["test_loss"] and isinstance(results, dict)
    validated = trainer.validate(dataloaders=DataLoader(torch.ones(4, 4)), verbose=False)[0]["val_loss"]
    assert validated == pytest.approx(results["test_loss"] / 2, rel=1e-6)  # means of float32 sums: rounding apart
    assert capsys.readouterr().out == ""
    assert trainer.predict(return_predictions=False) is None and len(trainer.predict()) == 4
    with pytest.raises(Exception, match="ckpt_path='best'"):
        L.Trainer(**QUIET).test(Boring(), ckpt_path="best")  # nothing written: a clear error saying what to add


def test_best_of_a_model_checkpoint_is_used_without_a_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Scored(Boring):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("score", float(self.current_epoch == 1))  # epoch 1 is the best

    best = callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", monitor="score", mode="max")
    trainer = L.Trainer(max_epochs=3, callbacks=[best], root_dir=tmp_path, num_sanity_val_steps=0, **{**QUIET, "enable_checkpointing": True})
    module = Scored()
    trainer.fit(module)
    last = module.layer.weight.detach().clone()
    assert "epoch=1" in best.best_model_path
    with caplog.at_level(logging.WARNING, logger="trainer"):
        trainer.test(verbose=False)  # ckpt_path=None without a model: the best, with Lightning's warning
    assert "best checkpoint of the previous fit" in caplog.text
    reloaded = Boring.load_from_checkpoint(best.best_model_path)
    assert trainer.lightning_module is module and torch.equal(reloaded.layer.weight, module.layer.weight)  # tested: the best
    assert not torch.equal(last, module.layer.weight)  # epoch 1's weights, not the last epoch's


def test_a_validation_loader_without_validation_step_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Lightning warns and skips validation (trainer/connectors/data_connector.py, "no `validation_step`")."""
    steps: list[int] = []

    class NoValidation(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).sum()

        def on_validation_start(self) -> None:
            steps.append(1)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(max_epochs=2, root_dir=tmp_path, **QUIET)
    loader = DataLoader(torch.ones(4, 4), batch_size=2)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        trainer.fit(NoValidation(), loader, loader)
        trainer.fit(NoValidation(), loader, loader)
    assert caplog.text.count("has no validation_step: validation is skipped") == 1 and steps == []


def test_configure_optimizers_returning_none_trains_without_a_step(tmp_path: Path) -> None:
    """Lightning: trainer/optimization/test_optimizers.py (a warning, training_step runs, no step)."""
    calls: list[int] = []

    class NoOptimizer(Boring):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            calls.append(batch_idx)
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> None:
            return None

    module = NoOptimizer()
    before = module.layer.weight.detach().clone()
    with pytest.warns(UserWarning, match="returned None"):
        L.Trainer(max_epochs=1, root_dir=tmp_path, **QUIET).fit(module)
    assert calls == list(range(8)) and torch.equal(module.layer.weight, before)


def test_load_from_checkpoint_rebuilds_from_saved_hyperparameters(tmp_path: Path) -> None:
    """Lightning: core/saving.py::_load_state (cls(**hparams, **overrides), on_load_checkpoint, weights)."""
    class Sized(L.LightningModule):
        def __init__(self, hidden: int = 3, lr: float = 0.1, encoder: torch.nn.Module | None = None) -> None:
            super().__init__()
            self.save_hyperparameters(ignore="encoder")
            self.layer = torch.nn.Linear(4, hidden)
            self.loaded: list[str] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.loaded.append(sorted(checkpoint)[0])

    module = Sized(hidden=5, lr=0.2)
    trainer = L.Trainer(max_steps=2, root_dir=tmp_path, **QUIET)
    trainer.fit(module, DataLoader(torch.ones(4, 4), batch_size=2))
    path = trainer.save_checkpoint(tmp_path / "sized.ckpt")
    again = Sized.load_from_checkpoint(path)
    assert again.hparams == {"hidden": 5, "lr": 0.2} and again.loaded and torch.equal(again.layer.weight, module.layer.weight)
    changed = Sized.load_from_checkpoint(str(path), map_location="cpu", lr=0.5)
    assert changed.hparams.lr == 0.5 and changed.hparams.hidden == 5
    with pytest.raises(RuntimeError, match="size mismatch"):
        Sized.load_from_checkpoint(path, hidden=2)
    from trainer.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="does not exist"):
        Sized.load_from_checkpoint(tmp_path / "missing.ckpt")


def test_tensorboard_logger_lightning_arguments(tmp_path: Path) -> None:
    """Lightning: loggers/tensorboard.py (save_dir/name/version -> save_dir/name/version_N; .experiment)."""
    logger = L.TensorBoardLogger(save_dir=tmp_path, name="exp", version=4)
    assert logger.log_dir == tmp_path / "exp" / "version_4" and logger.save_dir == tmp_path
    assert type(logger.experiment).__name__ == "SummaryWriter"
    logger.close()
    assert L.TensorBoardLogger(save_dir=tmp_path, name=None).log_dir == tmp_path / "version_0"
