"""Lightning's backbone image classifier, small: a conv backbone and a linear head on 8x8
images, a LightningDataModule, ModelCheckpoint on `val_loss`, EarlyStopping, validation and
test; `python classifier.py fit --config exp.yaml` runs the same through LightningCLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

import trainer as L
from callbacks import EarlyStopping, ModelCheckpoint
from trainer.cli import LightningCLI


class Backbone(torch.nn.Module):
    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, channels, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class LitClassifier(L.LightningModule):
    def __init__(self, channels: int = 4, hidden_dim: int = 16, learning_rate: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = Backbone(channels)
        self.head = torch.nn.Sequential(torch.nn.Linear(channels * 16, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class ShapesData(L.LightningDataModule):
    """Images whose label is the quadrant with the brightest mean, 96 train / 32 val / 32 test."""

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(7)
        images = torch.rand(160, 1, 8, 8, generator=g)
        quadrants = torch.stack([images[:, 0, :4, :4].mean((1, 2)), images[:, 0, :4, 4:].mean((1, 2)), images[:, 0, 4:].mean((1, 2))], 1)
        full = TensorDataset(images, quadrants.argmax(dim=1))
        self.train_set, self.val_set, self.test_set = random_split(full, [96, 32, 32], generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


def make_callbacks() -> list[Any]:
    return [
        ModelCheckpoint(monitor="val_loss", save_last=True),
        EarlyStopping(monitor="val_loss", patience=1, min_delta=0.05),
    ]


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    L.seed_everything(3)
    data = ShapesData()
    model = LitClassifier()
    trainer = L.Trainer(
        max_epochs=6,
        precision=precision,
        default_root_dir=root_dir,
        logger=False,
        callbacks=make_callbacks(),
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=data)
    validated = dict(trainer.callback_metrics)
    tested = trainer.test(model, datamodule=data, ckpt_path="best", verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "test": tested}


def cli_main() -> None:
    LightningCLI(LitClassifier, ShapesData)


if __name__ == "__main__":
    cli_main()
