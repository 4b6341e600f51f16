"""Lightning's "MNIST hello world" tutorial, small: first the simplest model (`relu(Linear)`,
Adam(lr=0.02)) fitted on a loader of the training set, then `LitMNIST`, a dropout MLP that
holds its own data (`prepare_data`, `setup(stage=None)` splitting with `random_split` on torch's
global generator, the three `*_dataloader` methods), logs a torchmetrics `Accuracy` object with
`prog_bar=True`, writes a CSVLogger, is tested with `trainer.test(ckpt_path="best")` and is
fitted once more by the same Trainer, as the tutorial does.

torchvision is not used: `MNIST` here is a synthetic stand-in with torchvision's arguments
(uint8 28x28 images drawn from a fixed generator, made a float tensor in [0, 1] and normalised
with MNIST's mean and std as `ToTensor` and `Normalize` would), the same for both frameworks;
320 training and 64 test images instead of 60000 and 10000, a 256/64 split, two epochs. The
tutorial seeds nothing; `main` seeds torch first so both frameworks start alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, random_split
from torchmetrics import Accuracy

import trainer as pl
from trainer.loggers import CSVLogger

BATCH_SIZE = 64
MAX_EPOCHS = 2


def to_normalized_tensor(image: torch.Tensor) -> torch.Tensor:
    """`ToTensor()` then `Normalize((0.1307,), (0.3081,))` on a uint8 28x28 image."""
    return (image.float().div(255).unsqueeze(0) - 0.1307) / 0.3081


class MNIST(Dataset):
    """Synthetic MNIST with torchvision's constructor: 320 training or 64 test images."""

    def __init__(self, root: str, train: bool = True, download: bool = False,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        generator = torch.Generator().manual_seed(1 if train else 2)
        count = 320 if train else 64
        self.targets = torch.randint(10, (count,), generator=generator)
        # a class-dependent stroke on noise, so the classes can be learnt
        noise = torch.randint(0, 80, (count, 28, 28), generator=generator)
        rows = (self.targets * 2 + 4).view(-1, 1, 1) == torch.arange(28).view(1, -1, 1)
        self.data = (noise + rows * 170).to(torch.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        return (self.transform(image) if self.transform else image), int(self.targets[index])


class MNISTModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_nb: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.02)


class LitMNIST(pl.LightningModule):
    def __init__(self, data_dir: str = ".", hidden_size: int = 64, learning_rate: float = 2e-4) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.hidden_size = hidden_size
        self.learning_rate = learning_rate
        self.num_classes = 10
        self.dims = (1, 28, 28)
        channels, width, height = self.dims
        self.transform = to_normalized_tensor
        self.model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * width * height, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, self.num_classes),
        )
        self.val_accuracy = Accuracy(task="multiclass", num_classes=10)
        self.test_accuracy = Accuracy(task="multiclass", num_classes=10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_nb: int) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(self(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_nb: int) -> None:
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        self.val_accuracy.update(torch.argmax(logits, dim=1), y)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", self.val_accuracy, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_nb: int) -> None:
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        self.test_accuracy.update(torch.argmax(logits, dim=1), y)
        self.log("test_loss", loss, prog_bar=True)
        self.log("test_acc", self.test_accuracy, prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)

    def prepare_data(self) -> None:
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str | None = None) -> None:
        if stage == "fit" or stage is None:
            mnist_full = MNIST(self.data_dir, train=True, transform=self.transform)
            self.mnist_train, self.mnist_val = random_split(mnist_full, [256, 64])
        if stage == "test" or stage is None:
            self.mnist_test = MNIST(self.data_dir, train=False, transform=self.transform)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=BATCH_SIZE)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=BATCH_SIZE)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=BATCH_SIZE)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    root = Path(root_dir)
    torch.manual_seed(0)
    simple = MNISTModel()
    train_loader = DataLoader(MNIST(str(root), train=True, download=True, transform=to_normalized_tensor),
                              batch_size=BATCH_SIZE)
    simple_trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=MAX_EPOCHS, precision=precision,
                                default_root_dir=root / "simple", enable_progress_bar=False)
    simple_trainer.fit(simple, train_loader)

    model = LitMNIST(data_dir=str(root))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=MAX_EPOCHS, precision=precision,
                         default_root_dir=root, logger=CSVLogger(save_dir=root / "logs"), enable_progress_bar=False)
    trainer.fit(model)
    val = dict(trainer.callback_metrics)
    fitted_step = trainer.global_step
    test = trainer.test(ckpt_path="best", verbose=False)[0]
    trainer.fit(model)  # the tutorial fits again: max_epochs is reached, nothing more trains
    return {"model": model, "trainer": trainer, "val": val, "test": test, "simple": simple,
            "simple_step": simple_trainer.global_step, "fitted_step": fitted_step,
            "metrics_csv": (Path(trainer.logger.log_dir) / "metrics.csv").read_text()}
