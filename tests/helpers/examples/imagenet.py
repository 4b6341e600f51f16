"""pytorch/examples' imagenet at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_imagenet.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

resnet18's shape at toy size (conv-BN-ReLU stem, a BasicBlock, pooling, fc), CrossEntropyLoss,
SGD(0.1, momentum=0.9, weight_decay=1e-4), StepLR(gamma=0.1) after each validation (step 30
of 90 epochs; here 2 of 3), AverageMeters of loss/acc@1/acc@5 weighted by batch size, best
acc@1 kept; RandomHorizontalFlip on training images (a torch.rand draw per image, in the
workers when the loader has them). `--seed` seeds Python's and torch's generators.
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tests.helpers.examples import amp_step, autocast_for, scaler_for
from trainer import Module


class AverageMeter:
    def __init__(self, name: str) -> None:
        self.name, self.val, self.avg, self.sum, self.count = name, 0, 0, 0, 0

    def update(self, val: Any, n: int = 1) -> None:
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def meters() -> list[AverageMeter]:
    return [AverageMeter("Loss"), AverageMeter("Acc@1"), AverageMeter("Acc@5")]


def accuracy(output: torch.Tensor, target: torch.Tensor, topk: tuple[int, ...] = (1,)) -> list[torch.Tensor]:
    with torch.no_grad():
        _, pred = output.topk(max(topk), 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / target.size(0)) for k in topk]


class TinyResNet(Module):
    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                   nn.ReLU(inplace=True), nn.Conv2d(width, width, 3, 1, 1, bias=False),
                                   nn.BatchNorm2d(width))
        self.fc = nn.Linear(width, classes)
        self.criterion = nn.CrossEntropyLoss()
        self.train_summaries: list[tuple[float, ...]] = []
        self.val_acc1: list[float] = []
        self.best_acc1: Any = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(x + self.block(x)), 1), 1))

    def step(self, batch: Any, meters: list[AverageMeter]) -> torch.Tensor:  # train()'s and validate()'s body
        images, target = batch
        output = self(images)
        loss = self.criterion(output, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        for meter, value in zip(meters, (loss.item(), acc1[0], acc5[0])):
            meter.update(value, images.size(0))
        return loss

    def remember(self, train: list[AverageMeter], val: list[AverageMeter]) -> None:
        self.train_summaries.append(tuple(float(m.avg) for m in train))
        self.val_acc1.append(float(val[1].avg))
        self.best_acc1 = max(val[1].avg, self.best_acc1)

    def on_train_epoch_start(self) -> None:
        self.meters = meters()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.step(batch, self.meters)

    def on_validation_epoch_start(self) -> None:
        self.val_meters = meters()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.step(batch, self.val_meters)

    def on_validation_epoch_end(self) -> None:
        self.remember(self.meters, self.val_meters)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)]


class Images(Dataset):
    def __init__(self, n: int, seed: int, flip: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x, self.flip = torch.randn(n, 3, 8, 8, generator=g), flip
        self.y = torch.bucketize(self.x[:, 0].mean((1, 2)), torch.linspace(-0.4, 0.4, 9))  # learnable labels

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        flip = self.flip and bool(torch.rand(1) < 0.5)  # RandomHorizontalFlip(p=0.5)
        return (self.x[i].flip(-1) if flip else self.x[i]), self.y[i]


def make_imagenet(workers: int = 0) -> tuple[TinyResNet, DataLoader, DataLoader]:
    import random
    random.seed(0)
    torch.manual_seed(0)
    model = TinyResNet()
    train = DataLoader(Images(28, 3, True), batch_size=8, shuffle=True, num_workers=workers)
    val = DataLoader(Images(12, 4, False), batch_size=8, shuffle=False, num_workers=workers)
    return model, train, val


def original_imagenet(precision: str, workers: int = 0, epochs: int = 3) -> TinyResNet:
    model, train_loader, val_loader = make_imagenet(workers)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    for _ in range(epochs):
        train_meters, val_meters = meters(), meters()
        model.train()
        for batch in train_loader:
            with autocast():
                loss = model.step(batch, train_meters)
            optimizer.zero_grad()
            amp_step(scaler, optimizer, loss)
        model.eval()
        with torch.no_grad():
            for batch in val_loader:
                with autocast():
                    model.step(batch, val_meters)
        scheduler.step()
        model.remember(train_meters, val_meters)
    return model
