"""Lightning's CIFAR10 baseline tutorial, small: a ResNet with `save_hyperparameters()`, SGD
with momentum and weight decay under a `OneCycleLR` sized from `self.trainer.max_epochs` and a
fixed steps-per-epoch (`interval="step"`), `LearningRateMonitor(logging_interval="step")`, a
CSVLogger, one `evaluate` helper logging `{stage}_loss`/`{stage}_acc`, fit then test; then
`SWAResnet`, a subclass wrapping the trained network in `torch.optim.swa_utils.AveragedModel`
(`save_hyperparameters("lr")` after the parent's `save_hyperparameters()`, the average updated
in `on_train_epoch_end`, a `validation_step` with an extra `stage=None` argument), fitted and
tested by a second Trainer. As in the tutorial, the SWA model's `forward` (so its training
step) runs the averaged copy, whose parameters are not the optimizer's.

torchvision is not used: CIFAR10 is a synthetic stand-in with torchvision's arguments (uint8
3x32x32 images from a fixed generator), resnet18 a small network of its shape (`conv1` and
`maxpool` replaced as the tutorial replaces them), and the training augmentation a torch-only
random crop with padding and horizontal flip drawing from torch's generator, the same for both
frameworks. 96 training images (a 77/19 split with the tutorial's seeded generator), 32 test
images, batches of 16, two epochs each, `num_workers=0`, `log_every_n_steps=1` for the first
Trainer (its 10 steps would log nothing at the default 50).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import OneCycleLR
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, Dataset, random_split
from torchmetrics.functional import accuracy

import trainer as pl
from callbacks import LearningRateMonitor
from trainer.loggers import CSVLogger

BATCH_SIZE = 16
NUM_WORKERS = 0
TRAIN_IMAGES = 96


class CIFAR10(Dataset):
    """Synthetic CIFAR10 with torchvision's constructor."""

    def __init__(self, root: str, train: bool = True, download: bool = False,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        generator = torch.Generator().manual_seed(5 if train else 6)
        count = TRAIN_IMAGES if train else 32
        self.targets = torch.randint(10, (count,), generator=generator)
        self.data = torch.randint(0, 256, (count, 3, 32, 32), generator=generator, dtype=torch.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        return (self.transform(image) if self.transform else image), int(self.targets[index])


def cifar10_normalization(image: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor([x / 255.0 for x in [125.3, 123.0, 113.9]]).view(3, 1, 1)
    std = torch.tensor([x / 255.0 for x in [63.0, 62.1, 66.7]]).view(3, 1, 1)
    return (image - mean) / std


def train_transforms(image: torch.Tensor) -> torch.Tensor:
    """RandomCrop(32, padding=4), RandomHorizontalFlip(), ToTensor(), normalisation."""
    padded = F.pad(image.float(), (4, 4, 4, 4))
    top, left = (int(v) for v in torch.randint(0, 9, (2,)))
    view = padded[:, top:top + 32, left:left + 32]
    if torch.rand(1) < 0.5:
        view = view.flip(-1)
    return cifar10_normalization(view / 255)


def test_transforms(image: torch.Tensor) -> torch.Tensor:
    return cifar10_normalization(image.float() / 255)


def split_dataset(dataset: Dataset, val_split: float | int = 0.2, train: bool = True) -> Dataset:
    splits = get_splits(len(dataset), val_split)  # type: ignore[arg-type]
    dataset_train, dataset_val = random_split(dataset, splits, generator=torch.Generator().manual_seed(42))
    return dataset_train if train else dataset_val


def get_splits(len_dataset: int, val_split: float | int) -> list[int]:
    if isinstance(val_split, int):
        return [len_dataset - val_split, val_split]
    if isinstance(val_split, float):
        val_len = int(val_split * len_dataset)
        return [len_dataset - val_len, val_len]
    raise ValueError(f"Unsupported type {type(val_split)}")


class ResNet(nn.Module):
    """A resnet18-shaped stand-in: conv1, bn1, relu, maxpool, a residual block, avgpool, fc."""

    def __init__(self, num_classes: int = 1000, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool: nn.Module = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.block(x)), 1))


def create_model() -> nn.Module:
    model = ResNet(num_classes=10)
    model.conv1 = nn.Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
    model.maxpool = nn.Identity()
    return model


class LitResnet(pl.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = create_model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.nll_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def evaluate(self, batch: Any, stage: str | None = None) -> None:
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        acc = accuracy(torch.argmax(logits, dim=1), y, task="multiclass", num_classes=10)
        if stage:
            self.log(f"{stage}_loss", loss, prog_bar=True)
            self.log(f"{stage}_acc", acc, prog_bar=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.evaluate(batch, "test")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)
        steps_per_epoch = TRAIN_IMAGES // BATCH_SIZE
        scheduler_dict = {
            "scheduler": OneCycleLR(optimizer, 0.1, epochs=self.trainer.max_epochs, steps_per_epoch=steps_per_epoch),
            "interval": "step",
        }
        return {"optimizer": optimizer, "lr_scheduler": scheduler_dict}


class SWAResnet(LitResnet):
    def __init__(self, trained_model: nn.Module, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters("lr")
        self.model = trained_model
        self.swa_model = AveragedModel(self.model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.swa_model(x), dim=1)

    def on_train_epoch_end(self) -> None:
        self.swa_model.update_parameters(self.model)

    def validation_step(self, batch: Any, batch_idx: int, stage: str | None = None) -> None:
        x, y = batch
        logits = F.log_softmax(self.model(x), dim=1)
        loss = F.nll_loss(logits, y)
        acc = accuracy(torch.argmax(logits, dim=1), y, task="multiclass", num_classes=10)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", acc, prog_bar=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.model.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    root = Path(root_dir)
    pl.seed_everything(7)
    dataset_train = split_dataset(CIFAR10(str(root), train=True, download=True, transform=train_transforms))
    dataset_val = split_dataset(CIFAR10(str(root), train=True, download=True, transform=test_transforms), train=False)
    dataset_test = CIFAR10(str(root), train=False, download=True, transform=test_transforms)
    train_dataloader = DataLoader(dataset_train, batch_size=BATCH_SIZE, shuffle=True, num_workers=NUM_WORKERS)
    val_dataloader = DataLoader(dataset_val, batch_size=BATCH_SIZE, shuffle=False, num_workers=NUM_WORKERS)
    test_dataloader = DataLoader(dataset_test, batch_size=BATCH_SIZE, shuffle=False, num_workers=NUM_WORKERS)

    model = LitResnet(lr=0.05)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, precision=precision, default_root_dir=root,
                         logger=CSVLogger(save_dir=root / "logs"), enable_progress_bar=False, log_every_n_steps=1,
                         callbacks=[LearningRateMonitor(logging_interval="step")])
    trainer.fit(model, train_dataloaders=train_dataloader, val_dataloaders=val_dataloader)
    val = dict(trainer.callback_metrics)
    test = trainer.test(model, dataloaders=test_dataloader, verbose=False)[0]
    base = {key: value.clone() for key, value in model.state_dict().items()}

    swa_model = SWAResnet(model.model, lr=0.01)
    swa_trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, precision=precision, default_root_dir=root,
                             logger=CSVLogger(save_dir=root / "logs"), enable_progress_bar=False)
    swa_trainer.fit(swa_model, train_dataloaders=train_dataloader, val_dataloaders=val_dataloader)
    swa_val = dict(swa_trainer.callback_metrics)
    swa_test = swa_trainer.test(swa_model, dataloaders=test_dataloader, verbose=False)[0]
    return {"model": swa_model, "trainer": swa_trainer, "val": swa_val, "test": swa_test,
            "base": base, "base_step": trainer.global_step, "base_val": val, "base_test": test,
            "hparams": dict(swa_model.hparams),
            "metrics_csv": (Path(trainer.logger.log_dir) / "metrics.csv").read_text(),
            "base_epochs": trainer.current_epoch}
