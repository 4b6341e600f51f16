"""Lightning's DataModules tutorial, small: the same MLP trained three ways, as the tutorial
does: first with its data inside the LightningModule (`prepare_data`, `setup(stage=None)`,
`*_dataloader`), then with an `MNISTDataModule` whose `dims` and `num_classes` build the model
(`LitModel(*dm.dims, dm.num_classes)`), then on a `CIFAR10DataModule` with a wider hidden
layer; `training_step(self, batch)` without `batch_idx`, `random_split` on torch's global
generator, `torchmetrics.functional.accuracy` logged with `prog_bar=True`.

torchvision is not used: MNIST and CIFAR10 are synthetic stand-ins with torchvision's arguments
(uint8 images from a fixed generator, made float tensors in [0, 1] and normalised as `ToTensor`
and `Normalize` would), the same for both frameworks: 96 training images (an 80/16 split) and
32 test images each, batches of 32, one epoch per run (the tutorial: 2, 3 and 5). `main`
seeds torch first (the tutorial seeds nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, random_split
from torchmetrics.functional import accuracy

import trainer as pl

PATH_DATASETS = "."
BATCH_SIZE = 32


class _Images(Dataset):
    shape: tuple[int, ...] = (28, 28)
    seed = 0

    def __init__(self, root: str, train: bool = True, download: bool = False,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        generator = torch.Generator().manual_seed(self.seed + (0 if train else 1))
        count = 96 if train else 32
        self.targets = torch.randint(10, (count,), generator=generator)
        self.data = torch.randint(0, 256, (count, *self.shape), generator=generator, dtype=torch.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        return (self.transform(image) if self.transform else image), int(self.targets[index])


class MNIST(_Images):
    shape = (28, 28)
    seed = 10


class CIFAR10(_Images):
    shape = (3, 32, 32)
    seed = 20


def normalized(mean: tuple[float, ...], std: tuple[float, ...]) -> Callable[[torch.Tensor], torch.Tensor]:
    """`Compose([ToTensor(), Normalize(mean, std)])` for a uint8 HxW or CxHxW image."""
    mean_t, std_t = torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)

    def transform(image: torch.Tensor) -> torch.Tensor:
        image = image.float().div(255)
        return ((image.unsqueeze(0) if image.dim() == 2 else image) - mean_t) / std_t

    return transform


def mlp(channels: int, width: int, height: int, hidden_size: int, num_classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(channels * width * height, hidden_size),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(hidden_size, hidden_size),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(hidden_size, num_classes),
    )


class LitMNIST(pl.LightningModule):
    def __init__(self, data_dir: str = PATH_DATASETS, hidden_size: int = 64, learning_rate: float = 2e-4) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.num_classes = 10
        self.dims = (1, 28, 28)
        channels, width, height = self.dims
        self.transform = normalized((0.1307,), (0.3081,))
        self.hidden_size = hidden_size
        self.learning_rate = learning_rate
        self.model = mlp(channels, width, height, hidden_size, self.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        acc = accuracy(torch.argmax(logits, dim=1), y, task="multiclass", num_classes=10)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", acc, prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)

    def prepare_data(self) -> None:
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str | None = None) -> None:
        if stage == "fit" or stage is None:
            mnist_full = MNIST(self.data_dir, train=True, transform=self.transform)
            self.mnist_train, self.mnist_val = random_split(mnist_full, [80, 16])
        if stage == "test" or stage is None:
            self.mnist_test = MNIST(self.data_dir, train=False, transform=self.transform)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=BATCH_SIZE)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=BATCH_SIZE)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=BATCH_SIZE)


class MNISTDataModule(pl.LightningDataModule):
    def __init__(self, data_dir: str = PATH_DATASETS) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.transform = normalized((0.1307,), (0.3081,))
        self.dims = (1, 28, 28)
        self.num_classes = 10

    def prepare_data(self) -> None:
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str | None = None) -> None:
        if stage == "fit" or stage is None:
            mnist_full = MNIST(self.data_dir, train=True, transform=self.transform)
            self.mnist_train, self.mnist_val = random_split(mnist_full, [80, 16])
        if stage == "test" or stage is None:
            self.mnist_test = MNIST(self.data_dir, train=False, transform=self.transform)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_train, batch_size=BATCH_SIZE)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_val, batch_size=BATCH_SIZE)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.mnist_test, batch_size=BATCH_SIZE)


class LitModel(pl.LightningModule):
    def __init__(self, channels: int, width: int, height: int, num_classes: int, hidden_size: int = 64,
                 learning_rate: float = 2e-4) -> None:
        super().__init__()
        self.channels = channels
        self.width = width
        self.height = height
        self.num_classes = num_classes
        self.hidden_size = hidden_size
        self.learning_rate = learning_rate
        self.model = mlp(channels, width, height, hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        acc = accuracy(torch.argmax(logits, dim=1), y, task="multiclass", num_classes=10)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", acc, prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class CIFAR10DataModule(pl.LightningDataModule):
    def __init__(self, data_dir: str = "./") -> None:
        super().__init__()
        self.data_dir = data_dir
        self.transform = normalized((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
        self.dims = (3, 32, 32)
        self.num_classes = 10

    def prepare_data(self) -> None:
        CIFAR10(self.data_dir, train=True, download=True)
        CIFAR10(self.data_dir, train=False, download=True)

    def setup(self, stage: str | None = None) -> None:
        if stage == "fit" or stage is None:
            cifar_full = CIFAR10(self.data_dir, train=True, transform=self.transform)
            self.cifar_train, self.cifar_val = random_split(cifar_full, [80, 16])
        if stage == "test" or stage is None:
            self.cifar_test = CIFAR10(self.data_dir, train=False, transform=self.transform)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.cifar_train, batch_size=BATCH_SIZE)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.cifar_val, batch_size=BATCH_SIZE)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.cifar_test, batch_size=BATCH_SIZE)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    root = Path(root_dir)
    options: dict[str, Any] = dict(max_epochs=1, accelerator="cpu", devices=1, precision=precision,
                                   default_root_dir=root, enable_progress_bar=False, log_every_n_steps=1)
    torch.manual_seed(0)
    model = LitMNIST(data_dir=str(root))
    trainer = pl.Trainer(**options)
    trainer.fit(model)

    dm = MNISTDataModule(data_dir=str(root))
    mnist_model = LitModel(*dm.dims, dm.num_classes)
    mnist_trainer = pl.Trainer(**options)
    mnist_trainer.fit(mnist_model, dm)

    cifar_dm = CIFAR10DataModule(data_dir=str(root))
    cifar_model = LitModel(*cifar_dm.dims, cifar_dm.num_classes, hidden_size=256)
    cifar_trainer = pl.Trainer(**options)
    cifar_trainer.fit(cifar_model, cifar_dm)
    return {"model": cifar_model, "trainer": cifar_trainer, "val": dict(cifar_trainer.callback_metrics),
            "runs": [(m, t.global_step, dict(t.callback_metrics)) for m, t in ((model, trainer), (mnist_model, mnist_trainer))]}
