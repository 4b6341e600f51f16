"""Lightning's bug-report template: a BoringModel on random data, SGD, validation and test.

The model and data are the shipped demo's (`trainer.demos.boring_classes`; the twin imports
Lightning's own), with the template's steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from trainer import Trainer, seed_everything
from trainer.demos.boring_classes import BoringModel as DemoBoringModel
from trainer.demos.boring_classes import RandomDataset


class BoringModel(DemoBoringModel):
    """The demo's `Linear(32, 2)` as Lightning's bug-report template trains it: the summed
    output as the loss, logged in every stage, plain SGD, its loaders of batch size 2."""

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> dict[str, torch.Tensor]:
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        loss = self(batch).sum()
        self.log("valid_loss", loss)

    def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        loss = self(batch).sum()
        self.log("test_loss", loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64), batch_size=2)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64), batch_size=2)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64), batch_size=2)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    seed_everything(0)
    train_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    val_data = DataLoader(RandomDataset(32, 64), batch_size=2)
    test_data = DataLoader(RandomDataset(32, 64), batch_size=2)

    model = BoringModel()
    trainer = Trainer(
        default_root_dir=root_dir,
        limit_train_batches=5,
        limit_val_batches=3,
        limit_test_batches=4,
        num_sanity_val_steps=0,
        max_epochs=2,
        precision=precision,
        logger=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, train_dataloaders=train_data, val_dataloaders=val_data)
    validated = dict(trainer.callback_metrics)
    tested = trainer.test(model, dataloaders=test_data, verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "test": tested}
