"""pytorch/examples' super_resolution at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_super_resolution.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

Conv layers with orthogonal init and a PixelShuffle, MSELoss, Adam(lr=0.01), a shuffled
training loader, an unshuffled test loader; test() computes the mean PSNR under no_grad
and never calls model.eval() (nor model.train()); the epoch loss is printed as a mean.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.examples import amp_step, autocast_for, scaler_for
from trainer import Module


class SuperResolutionNet(Module):
    def __init__(self, upscale_factor: int = 2, width: int = 8) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, width, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(width, width, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(width, width // 2, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(width // 2, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        for conv in (self.conv1, self.conv2, self.conv3):
            nn.init.orthogonal_(conv.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv4.weight)
        self.criterion = nn.MSELoss()
        self.epoch_losses: list[float] = []
        self.psnrs: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv3(self.relu(self.conv2(self.relu(self.conv1(x))))))
        return self.pixel_shuffle(self.conv4(x))

    def on_train_epoch_start(self) -> None:
        self.epoch_loss = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.criterion(self(batch[0]), batch[1])
        self.epoch_loss += loss.item()
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_losses.append(self.epoch_loss / len(self.trainer.train_dataloader))

    def on_validation_epoch_start(self) -> None:
        self.avg_psnr = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.avg_psnr += 10 * math.log10(1 / self.criterion(self(batch[0]), batch[1]).item())

    def on_validation_epoch_end(self) -> None:
        self.psnrs.append(self.avg_psnr / len(self.trainer.val_dataloaders))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


def make_super_resolution(threads: int = 0) -> tuple[SuperResolutionNet, DataLoader, DataLoader]:
    def images(n: int, seed: int) -> TensorDataset:  # the target, and its 2x downscaled input
        target = torch.rand(n, 1, 12, 12, generator=torch.Generator().manual_seed(seed))
        return TensorDataset(F.avg_pool2d(target, 2), target)

    torch.manual_seed(123)
    train = DataLoader(images(16, 1), num_workers=threads, batch_size=4, shuffle=True)
    test = DataLoader(images(6, 2), num_workers=threads, batch_size=3, shuffle=False)
    return SuperResolutionNet(), train, test


def original_super_resolution(precision: str, epochs: int = 2, threads: int = 0) -> SuperResolutionNet:
    model, training_data_loader, testing_data_loader = make_super_resolution(threads)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        epoch_loss = 0.0
        for input, target in training_data_loader:
            optimizer.zero_grad()
            with autocast():
                loss = model.criterion(model(input), target)
            epoch_loss += loss.item()
            amp_step(scaler, optimizer, loss)
        model.epoch_losses.append(epoch_loss / len(training_data_loader))
        avg_psnr = 0.0
        with torch.no_grad():
            for input, target in testing_data_loader:
                with autocast():
                    mse = model.criterion(model(input), target)
                avg_psnr += 10 * math.log10(1 / mse.item())
        model.psnrs.append(avg_psnr / len(testing_data_loader))
    return model
