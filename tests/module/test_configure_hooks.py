"""The module's `prepare_data`, `configure_model` and `configure_callbacks`, called where
Lightning calls them, compared with real Lightning where it is installed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import callbacks
from trainer import Callback, Module, Trainer


def data() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=generator), torch.randn(16, 1, generator=generator)),
                      batch_size=4)


class Late(Module):
    """Builds its layer in configure_model; records the order of its hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.net: torch.nn.Module | None = None

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{getattr(stage, 'value', stage)}")  # Lightning passes a str enum

    def configure_model(self) -> None:
        self.calls.append("configure_model")
        if self.net is None:  # idempotent: called in every stage
            torch.manual_seed(3)
            self.net = torch.nn.Linear(4, 1)

    def configure_optimizers(self) -> Any:
        self.calls.append("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))


def test_prepare_data_then_setup_then_configure_model_then_optimizers():
    model = Late()
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, data())
    assert model.calls == ["prepare_data", "setup:fit", "configure_model", "configure_optimizers"]
    trainer.validate(model, data(), verbose=False)
    assert model.calls[4:] == ["prepare_data", "setup:validate", "configure_model"]


class Marker(Callback):
    def __init__(self, name: str) -> None:
        self.name = name


class WithCallbacks(Late):
    def configure_callbacks(self) -> Any:
        return [Marker("module's"), callbacks.EarlyStopping(monitor="val_loss", patience=7)]


def test_configure_callbacks_replaces_same_class_callbacks_and_checkpoints_stay_last(tmp_path):
    saver, mine = callbacks.ModelCheckpoint(dirpath=tmp_path), Marker("trainer's")
    other = callbacks.LearningRateMonitor()
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, callbacks=[saver, mine, other], root_dir=tmp_path)
    trainer.fit(WithCallbacks(), data(), data())  # EarlyStopping(monitor="val_loss") needs a validation, as in Lightning
    kinds = [type(c).__name__ for c in trainer.callbacks]
    assert kinds == ["LearningRateMonitor", "Marker", "EarlyStopping", "ModelCheckpoint"]
    assert [c.name for c in trainer.callbacks if isinstance(c, Marker)] == ["module's"]
    assert trainer.early_stopping_callback.patience == 7


def test_configure_callbacks_and_configure_model_match_lightning(tmp_path):
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping

    class Twin(lightning.pytorch.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []
            self.net: torch.nn.Module | None = None

        prepare_data = Late.prepare_data
        setup = Late.setup
        configure_model = Late.configure_model
        configure_optimizers = Late.configure_optimizers
        training_step = Late.training_step
        validation_step = Late.validation_step

        def configure_callbacks(self) -> Any:
            return [LightningEarlyStopping(monitor="val_loss", patience=7)]

    class Ours(Late):
        def configure_callbacks(self) -> Any:
            return [callbacks.EarlyStopping(monitor="val_loss", patience=7)]

    theirs = Twin()
    run = lightning.pytorch.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                    enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu")
    run.fit(theirs, data(), data())
    ours = Ours()
    Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(ours, data(), data())
    assert ours.calls == theirs.calls
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
