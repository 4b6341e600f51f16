"""Lightning's Barlow Twins tutorial, small: two augmented views and a fine-tuning view of
every image drawn in the dataset's transform, an encoder with a BatchNorm projection head, the
cross-correlation loss, Adam with a linear warm-up (`LambdaLR` over a `functools.partial`,
`interval="step"`), and the `OnlineFineTuner` callback, which adds a linear classifier to the
module in `on_fit_start` and trains it with its own optimizer in `on_train_batch_end`
(`loss.backward()` there), logging from the callback in training and validation
(`sync_dist=True`); `ModelCheckpoint(every_n_epochs=..., save_top_k=-1, save_last=True)`.

torchvision is not used: CIFAR10 is a synthetic stand-in with torchvision's arguments (uint8
3x32x32 images from a fixed generator), the encoder a small ResNet-shaped network (its `conv1`,
`maxpool` and `fc` replaced as the tutorial replaces resnet18's), and the augmentations
torch-only ones of the same kinds (random crop with padding, horizontal flip, colour jitter
and grayscale, each applied at random) drawing from torch's generator, the same for both
frameworks. 32 training and 16 validation images, batches of 16, two epochs, one of warm-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchmetrics.functional import accuracy

import trainer as pl
from callbacks import Callback, ModelCheckpoint

batch_size = 16
num_workers = 0
max_epochs = 2
z_dim = 16
encoder_out_dim = 16


class CIFAR10(Dataset):
    """Synthetic CIFAR10 with torchvision's constructor: 32 training or 16 test images."""

    def __init__(self, root: str, train: bool = True, download: bool = False,
                 transform: Callable[[Tensor], Any] | None = None) -> None:
        generator = torch.Generator().manual_seed(3 if train else 4)
        count = 32 if train else 16
        self.targets = torch.randint(10, (count,), generator=generator)
        self.data = torch.randint(0, 256, (count, 3, 32, 32), generator=generator, dtype=torch.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        return (self.transform(image) if self.transform else image), int(self.targets[index])


def to_tensor(image: Tensor) -> Tensor:
    return image.float().div(255)


def random_crop(image: Tensor, size: int, padding: int, mode: str = "constant") -> Tensor:
    padded = F.pad(image.float().unsqueeze(0), (padding,) * 4, mode=mode).squeeze(0)
    top, left = (int(v) for v in torch.randint(0, padded.shape[-1] - size + 1, (2,)))
    return padded[:, top:top + size, left:left + size]


def random_flip(image: Tensor, p: float = 0.5) -> Tensor:
    return image.flip(-1) if torch.rand(1) < p else image


def color_jitter(image: Tensor, strength: float) -> Tensor:
    brightness = float(torch.empty(1).uniform_(1 - strength, 1 + strength))
    contrast = float(torch.empty(1).uniform_(1 - strength, 1 + strength))
    mean = image.mean()
    return ((image * brightness - mean) * contrast + mean).clamp(0, 255)


class BarlowTwinsTransform:
    def __init__(self, train: bool = True, input_height: int = 224, gaussian_blur: bool = True,
                 jitter_strength: float = 1.0, normalize: Callable[[Tensor], Tensor] | None = None) -> None:
        self.input_height = input_height
        self.gaussian_blur = gaussian_blur
        self.jitter_strength = jitter_strength
        self.normalize = normalize
        self.train = train

    def transform(self, image: Tensor) -> Tensor:
        view = random_flip(random_crop(image, self.input_height, padding=4))
        if torch.rand(1) < 0.8:
            view = color_jitter(view, 0.8 * self.jitter_strength)
        if torch.rand(1) < 0.2:
            view = view.mean(0, keepdim=True).expand_as(view)
        view = to_tensor(view)
        return self.normalize(view) if self.normalize else view

    def finetune_transform(self, image: Tensor) -> Tensor:
        if not self.train:
            return to_tensor(image)
        return to_tensor(random_flip(random_crop(image, 32, padding=4, mode="reflect")))

    def __call__(self, sample: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.transform(sample), self.transform(sample), self.finetune_transform(sample)


def cifar10_normalization() -> Callable[[Tensor], Tensor]:
    mean = torch.tensor([x / 255.0 for x in [125.3, 123.0, 113.9]]).view(3, 1, 1)
    std = torch.tensor([x / 255.0 for x in [63.0, 62.1, 66.7]]).view(3, 1, 1)
    return lambda image: (image - mean) / std


class SmallResNet(nn.Module):
    """A resnet18-shaped stand-in: conv1, bn1, relu, maxpool, one residual block, avgpool, fc."""

    def __init__(self, width: int = encoder_out_dim) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, 1000)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = x + self.block(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class BarlowTwinsLoss(nn.Module):
    def __init__(self, batch_size: int, lambda_coeff: float = 5e-3, z_dim: int = 128) -> None:
        super().__init__()
        self.z_dim = z_dim
        self.batch_size = batch_size
        self.lambda_coeff = lambda_coeff

    def off_diagonal_ele(self, x: Tensor) -> Tensor:
        n, m = x.shape
        assert n == m
        return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        z1_norm = (z1 - torch.mean(z1, dim=0)) / torch.std(z1, dim=0)
        z2_norm = (z2 - torch.mean(z2, dim=0)) / torch.std(z2, dim=0)
        cross_corr = torch.matmul(z1_norm.T, z2_norm) / self.batch_size
        on_diag = torch.diagonal(cross_corr).add_(-1).pow_(2).sum()
        off_diag = self.off_diagonal_ele(cross_corr).pow_(2).sum()
        return on_diag + self.lambda_coeff * off_diag


class ProjectionHead(nn.Module):
    def __init__(self, input_dim: int = 2048, hidden_dim: int = 2048, output_dim: int = 128) -> None:
        super().__init__()
        self.projection_head = nn.Sequential(
            nn.Linear(input_dim, hidden_dim, bias=True),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, output_dim, bias=False),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.projection_head(x)


def fn(warmup_steps: int, step: int) -> float:
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    return 1.0


def linear_warmup_decay(warmup_steps: int) -> Callable[[int], float]:
    return partial(fn, warmup_steps)


class BarlowTwins(pl.LightningModule):
    def __init__(self, encoder: nn.Module, encoder_out_dim: int, num_training_samples: int, batch_size: int,
                 lambda_coeff: float = 5e-3, z_dim: int = 128, learning_rate: float = 1e-4, warmup_epochs: int = 10,
                 max_epochs: int = 200) -> None:
        super().__init__()
        self.encoder = encoder
        self.projection_head = ProjectionHead(input_dim=encoder_out_dim, hidden_dim=encoder_out_dim, output_dim=z_dim)
        self.loss_fn = BarlowTwinsLoss(batch_size=batch_size, lambda_coeff=lambda_coeff, z_dim=z_dim)
        self.learning_rate = learning_rate
        self.warmup_epochs = warmup_epochs
        self.max_epochs = max_epochs
        self.train_iters_per_epoch = num_training_samples // batch_size

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def shared_step(self, batch: Any) -> Tensor:
        (x1, x2, _), _ = batch
        z1 = self.projection_head(self.encoder(x1))
        z2 = self.projection_head(self.encoder(x2))
        return self.loss_fn(z1, z2)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = self.shared_step(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = self.shared_step(batch)
        self.log("val_loss", loss, on_step=False, on_epoch=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.learning_rate)
        warmup_steps = self.train_iters_per_epoch * self.warmup_epochs
        scheduler = {
            "scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, linear_warmup_decay(warmup_steps)),
            "interval": "step",
            "frequency": 1,
        }
        return [optimizer], [scheduler]


class OnlineFineTuner(Callback):
    def __init__(self, encoder_output_dim: int, num_classes: int) -> None:
        super().__init__()
        self.optimizer: torch.optim.Optimizer
        self.encoder_output_dim = encoder_output_dim
        self.num_classes = num_classes

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.online_finetuner = nn.Linear(self.encoder_output_dim, self.num_classes).to(pl_module.device)
        self.optimizer = torch.optim.Adam(pl_module.online_finetuner.parameters(), lr=1e-4)

    def extract_online_finetuning_view(self, batch: Sequence, device: str | torch.device) -> tuple[Tensor, Tensor]:
        (_, _, finetune_view), y = batch
        return finetune_view.to(device), y.to(device)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Sequence, batch: Sequence,
                           batch_idx: int) -> None:
        x, y = self.extract_online_finetuning_view(batch, pl_module.device)
        with torch.no_grad():
            feats = pl_module(x)
        feats = feats.detach()
        preds = pl_module.online_finetuner(feats)
        loss = F.cross_entropy(preds, y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        acc = accuracy(F.softmax(preds, dim=1), y, task="multiclass", num_classes=10)
        pl_module.log("online_train_acc", acc, on_step=True, on_epoch=False)
        pl_module.log("online_train_loss", loss, on_step=True, on_epoch=False)

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Sequence,
                                batch: Sequence, batch_idx: int) -> None:
        x, y = self.extract_online_finetuning_view(batch, pl_module.device)
        with torch.no_grad():
            feats = pl_module(x)
        feats = feats.detach()
        preds = pl_module.online_finetuner(feats)
        loss = F.cross_entropy(preds, y)
        acc = accuracy(F.softmax(preds, dim=1), y, task="multiclass", num_classes=10)
        pl_module.log("online_val_acc", acc, on_step=False, on_epoch=True, sync_dist=True)
        pl_module.log("online_val_loss", loss, on_step=False, on_epoch=True, sync_dist=True)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    root = Path(root_dir)
    pl.seed_everything(11)
    train_transform = BarlowTwinsTransform(train=True, input_height=32, gaussian_blur=False, jitter_strength=0.5,
                                           normalize=cifar10_normalization())
    train_dataset = CIFAR10(root=str(root), train=True, download=True, transform=train_transform)
    val_transform = BarlowTwinsTransform(train=False, input_height=32, gaussian_blur=False, jitter_strength=0.5,
                                         normalize=cifar10_normalization())
    val_dataset = CIFAR10(root=str(root), train=False, download=True, transform=val_transform)
    train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True)
    val_loader = DataLoader(val_dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, drop_last=True)

    encoder = SmallResNet()
    encoder.conv1 = nn.Conv2d(3, encoder_out_dim, kernel_size=3, stride=1, padding=1, bias=False)
    encoder.maxpool = nn.MaxPool2d(kernel_size=1, stride=1)
    encoder.fc = nn.Identity()
    model = BarlowTwins(encoder=encoder, encoder_out_dim=encoder_out_dim, num_training_samples=len(train_dataset),
                        batch_size=batch_size, z_dim=z_dim, warmup_epochs=1, max_epochs=max_epochs)
    online_finetuner = OnlineFineTuner(encoder_output_dim=encoder_out_dim, num_classes=10)
    checkpoint_callback = ModelCheckpoint(every_n_epochs=1, save_top_k=-1, save_last=True)
    trainer = pl.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1, precision=precision,
                         callbacks=[online_finetuner, checkpoint_callback], default_root_dir=root,
                         enable_progress_bar=False, log_every_n_steps=1)
    trainer.fit(model, train_loader, val_loader)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics),
            "checkpoints": sorted(path.name for path in root.rglob("checkpoints/*.ckpt"))}
