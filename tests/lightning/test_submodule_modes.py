"""Train/eval modes during fit, as Lightning 2 keeps them: the Trainer never calls `.train()` on
the module (not when fit starts, not at an epoch's start); evaluation puts it in eval mode and
restores each submodule's mode after. A submodule the user put in eval mode (a distillation
teacher, a backbone whose batch-norm statistics are frozen) trains in eval mode, and training
that starts with modules in eval mode gets Lightning's warning."""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

import lightning
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer


def make(base: type) -> Any:
    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.teacher = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
            self.backbone = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
            self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(8, 2))
            self.teacher.eval()   # its dropout off
            self.backbone.eval()  # its batch-norm statistics frozen
            self.modes: list[tuple[bool, bool, bool]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, = batch
            self.modes.append((self.teacher.training, self.backbone.training, self.head.training))
            with torch.no_grad():
                target = self.teacher(x)
            return nn.functional.mse_loss(self.head(self.backbone(x)), target)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.head(self.backbone(batch[0]))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net


def train(base: type, trainer_class: type, **options: Any) -> Any:
    torch.manual_seed(0)
    model = make(base)()
    data = TensorDataset(torch.randn(16, 4))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    trainer = trainer_class(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, num_sanity_val_steps=2, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, loader, DataLoader(data, batch_size=4))
    model.eval_warnings = [str(w.message) for w in caught if "in eval mode at the start of training" in str(w.message)]
    return model


def test_submodules_in_eval_mode_train_as_under_lightning(tmp_path: Any) -> None:
    ours = train(Module, Trainer, device="cpu", root_dir=tmp_path)
    theirs = train(lightning.LightningModule, lightning.Trainer, accelerator="cpu",
                   default_root_dir=tempfile.mkdtemp(dir=tmp_path))
    assert ours.modes == theirs.modes == [(False, False, True)] * 8  # after each validation too
    for key, value in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    assert len(ours.eval_warnings) == len(theirs.eval_warnings) == 1
    assert ours.eval_warnings[0].startswith("Found 8 module(s) in eval mode at the start of training (teacher, backbone)")
    assert theirs.eval_warnings[0].startswith("Found 8 module(s)")


def test_a_module_in_train_mode_gets_no_warning(tmp_path: Any) -> None:
    class AllTraining(make(Module)):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.train()

    model = AllTraining()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                device="cpu", root_dir=tmp_path).fit(model, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    assert set(model.modes) == {(True, True, True)}
