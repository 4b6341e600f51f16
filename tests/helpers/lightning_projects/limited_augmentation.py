"""Short epochs over an augmented image set, the way quick experiments and sweeps run them: a
`LightningDataModule` whose training set flips and jitters every image at random in
`__getitem__` (torch's generator, main process, `num_workers=0`), a small CNN with dropout,
`limit_train_batches` (an int or a fraction), `limit_val_batches`, the default sanity check, a
per-step OneCycle schedule and `ModelCheckpoint(monitor="val_acc")`. Every batch read draws from
the same generator as dropout, so one batch too many read at an epoch's end shifts every later
epoch. `main(..., max_steps=n)` stops inside a limited epoch instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import trainer as L
from callbacks import ModelCheckpoint


class Shapes(Dataset):
    """8x8 single-channel images of two classes; `augment` flips and jitters them at random."""

    def __init__(self, count: int, seed: int, augment: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (count,), generator=g)
        base = torch.zeros(count, 1, 8, 8)
        base[self.labels == 0, :, 2:6, 3:5] = 1.0  # a bar
        base[self.labels == 1, :, 3:5, 1:7] = 1.0  # a wider one
        self.images = base + 0.3 * torch.randn(count, 1, 8, 8, generator=g)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if self.augment:
            if torch.rand(()) < 0.5:
                image = image.flip(-1)
            image = image + 0.1 * torch.randn_like(image)
        return image, self.labels[index]


class ShapesData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        self.train_set = Shapes(96, seed=0, augment=True)
        self.val_set = Shapes(32, seed=1, augment=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class SmallCNN(L.LightningModule):
    def __init__(self, lr: float = 0.01, total_steps: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.25), torch.nn.Linear(64, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=self.hparams.total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir: str | Path, precision: str = "32-true", limit: int | float = 4, max_epochs: int = 4,
         max_steps: int = -1) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(21)
    data = ShapesData()
    model = SmallCNN(total_steps=4 * max_epochs)
    checkpoint = ModelCheckpoint(dirpath=root_dir / "ckpts", monitor="val_acc", mode="max", save_top_k=1)
    trainer = L.Trainer(max_epochs=max_epochs, max_steps=max_steps, limit_train_batches=limit, limit_val_batches=2,
                        precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[checkpoint], enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, datamodule=data)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics),
            "lr": trainer.optimizers[0].param_groups[0]["lr"], "after": torch.rand(4)}
