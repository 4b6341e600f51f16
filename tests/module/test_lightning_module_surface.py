"""The LightningModule surface of `Module`: `save_hyperparameters` (with `ignore`), `hparams`
read by attribute or key (inside `__init__` too), `device`, and steps written without
`batch_idx`, as Lightning allows."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer


class Saved(Module):
    def __init__(self, hidden: int = 4, lr: float = 0.1, encoder: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore="encoder")
        self.net = torch.nn.Linear(2, self.hparams.hidden)  # readable inside __init__, by attribute
        self.seen_lr = self.hparams["lr"]

    def training_step(self, batch):  # no batch_idx, as Lightning allows
        (x,) = batch
        return self.net(x).pow(2).mean()

    def validation_step(self, batch):
        (x,) = batch
        self.log("val/x", x.mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def test_save_hyperparameters_hparams_attributes_and_device():
    model = Saved(hidden=3, encoder=torch.nn.Linear(1, 1))
    assert model.hparams == {"hidden": 3, "lr": 0.1} and model.hparams.hidden == 3 and model.seen_lr == 0.1
    assert model.device == torch.device("cpu")
    with pytest.raises(AttributeError, match="hparams has no 'width'"):
        _ = model.hparams.width
    model.hparams = {"a": 1}  # assigned by the user: attribute access too
    assert model.hparams.a == 1


def test_steps_without_batch_idx():
    data = DataLoader(TensorDataset(torch.ones(8, 2)), batch_size=4)
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Saved(), data, data)
    assert trainer.global_step == 2 and trainer.callback_metrics["val/x"] == 1.0
