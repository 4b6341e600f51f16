"""An autoencoder with a LightningDataModule: train/val/test split, Adam, validation and test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

import trainer as L


class PatchData(L.LightningDataModule):
    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()

    def prepare_data(self) -> None:
        pass  # a download would go here

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        full = TensorDataset(torch.rand(112, 1, 8, 8, generator=g))
        self.train_set, self.val_set, self.test_set = random_split(full, [80, 16, 16], generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


class LitAutoEncoder(L.LightningModule):
    def __init__(self, hidden_dim: int = 16, learning_rate: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(64, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 3))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(3, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x.view(x.size(0), -1)))

    def _loss(self, batch: Any) -> torch.Tensor:
        (x,) = batch
        return F.mse_loss(self(x), x.view(x.size(0), -1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class SaveEveryEpoch(L.Callback):
    """Saves `epoch=N.ckpt` into `folder` at the end of every training epoch."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.save_checkpoint(self.folder / f"epoch={trainer.current_epoch}.ckpt")


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3, ckpt_path: str | None = None,
         save_every_epoch_to: str | Path | None = None) -> dict[str, Any]:
    L.seed_everything(1234)
    data = PatchData()
    model = LitAutoEncoder()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[SaveEveryEpoch(save_every_epoch_to)] if save_every_epoch_to is not None else [],
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    validated = trainer.validate(model, datamodule=data, verbose=False)[0]
    tested = trainer.test(model, datamodule=data, verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "test": tested}
