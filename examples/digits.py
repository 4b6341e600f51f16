"""The model and the data of the YAML digits experiments (examples/digits_*.yaml).

The 8x8 handwritten digits of scikit-learn (1,797 images, shipped inside the package, so
no download): `DigitsClassifier` is a small MLP, `Digits` splits the images into fixed
train / validation / test sets and serves them as DataLoaders.

Run from the repository's root (the config's folder is put on the import path):
    trainer fit examples/digits_fp32.yaml
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module


class DigitsClassifier(Module):
    """An MLP from 64 pixels to 10 classes.

    Args:
        hidden: width of the hidden layer.
        lr: Adam's learning rate.
        weight_decay: Adam's weight decay.
    """

    def __init__(self, hidden: int = 128, lr: float = 3e-3, weight_decay: float = 0.0) -> None:
        super().__init__()
        self.lr, self.weight_decay = lr, weight_decay
        self.hparams = {"hidden": hidden, "lr": lr, "weight_decay": weight_decay}
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(dim=1)

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}/loss", F.cross_entropy(logits.float(), y), batch_size=len(y))
        self.log(f"{stage}/acc", (logits.argmax(dim=1) == y).float().mean(), batch_size=len(y), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)


class Digits:
    """scikit-learn's digits, split once by `split_seed` into train / val / test.

    Args:
        batch_size: samples per batch.
        val_fraction: share of the images held out for validation (as much again for test).
        split_seed: seed of the split (independent of the run's seed).
    """

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.15, split_seed: int = 0) -> None:
        from sklearn.datasets import load_digits

        images, labels = load_digits(return_X_y=True)
        x = torch.tensor(images, dtype=torch.float32) / 16.0
        y = torch.tensor(labels, dtype=torch.int64)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(split_seed))
        held_out = int(len(x) * val_fraction)
        val, test, train = order[:held_out], order[held_out : 2 * held_out], order[2 * held_out :]
        self.batch_size = batch_size
        self.train = TensorDataset(x[train], y[train])
        self.val = TensorDataset(x[val], y[val])
        self.test = TensorDataset(x[test], y[test])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=256)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=256)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.test.tensors[0]), batch_size=256)
