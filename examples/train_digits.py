"""Train a small MLP on handwritten digits with `Trainer(...).fit(...)`, in plain Python.

The 8x8 digits ship inside scikit-learn (`pip install loopwright[examples]`), so this runs
offline in a few seconds on a CPU:

    python examples/train_digits.py              # fp32
    python examples/train_digits.py --precision bf16
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer


class DigitsMLP(Module):
    def __init__(self, hidden: int = 128, lr: float = 3e-3) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val/loss", F.cross_entropy(logits.float(), y), batch_size=len(y))
        self.log("val/acc", (logits.argmax(dim=1) == y).float().mean(), batch_size=len(y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def digits_loaders(batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    images, labels = load_digits(return_X_y=True)
    x = torch.tensor(images, dtype=torch.float32) / 16.0
    y = torch.tensor(labels)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    val, train = order[:300], order[300:]
    return (
        DataLoader(TensorDataset(x[train], y[train]), batch_size=batch_size, shuffle=True),
        DataLoader(TensorDataset(x[val], y[val]), batch_size=256),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "amp", "bf16"])
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    train_loader, val_loader = digits_loaders()
    trainer = Trainer(precision=args.precision, max_epochs=args.epochs, seed=42, log_every_n_steps=10,
                      root_dir="runs/train_digits")
    trainer.fit(DigitsMLP(), train_loader, val_loader)
    print(f"final validation accuracy: {trainer.callback_metrics['val/acc']:.3f}")


if __name__ == "__main__":
    main()
