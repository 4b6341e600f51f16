"""pytorch/examples' mnist_rnn at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_mnist_rnn.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

An LSTM over the rows of each image, BatchNorm1d and Dropout2d on its last output,
Adadelta(lr=0.1), StepLR(step_size=1, gamma=0.7) after each epoch's test pass; the test
loader shuffles (as the example's does); the test pass sums the loss and counts the hits.
--dry-run breaks both loops after their first batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from tests.helpers.cpu import autocast_supports
from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module


SIDE = 6


class MnistRNN(Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(input_size=SIDE, hidden_size=12, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(12)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(12, 10)
        self.fc2 = nn.Linear(10, 10)
        self.results: list[tuple[float, int]] = []

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        input = input.reshape(-1, SIDE, SIDE)
        if torch.is_autocast_enabled("cpu") and not autocast_supports("lstm", torch.get_autocast_dtype("cpu")):
            # oneDNN has no float16 LSTM on most CPUs, and no bfloat16 one without AVX-512 ("could
            # not create a primitive descriptor"): there the LSTM runs in float32, in the original
            # and the port alike (tests/helpers/cpu.py).
            with torch.autocast("cpu", enabled=False):
                output, _ = self.rnn(input.float())
        else:
            output, _ = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = F.relu(self.fc1(output))
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output.float(), dim=1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        data, target = batch
        return F.nll_loss(self(data), target)

    def on_validation_epoch_start(self) -> None:
        self.test_loss, self.correct = 0.0, 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        data, target = batch
        output = self(data)
        self.test_loss += F.nll_loss(output, target, reduction="sum").item()
        pred = output.argmax(dim=1, keepdim=True)
        self.correct += pred.eq(target.view_as(pred)).sum().item()
        self.log("val/loss", F.nll_loss(output, target))

    def on_validation_epoch_end(self) -> None:
        self.results.append((self.test_loss / len(self.trainer.val_dataloaders.dataset), self.correct))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adadelta(self.parameters(), lr=0.1)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


def mnist_rnn_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(3)
    train = torch.utils.data.TensorDataset(torch.randn(40, 1, SIDE, SIDE, generator=g), torch.randint(0, 10, (40,), generator=g))
    test = torch.utils.data.TensorDataset(torch.randn(20, 1, SIDE, SIDE, generator=g), torch.randint(0, 10, (20,), generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=8, shuffle=True)


def make_mnist_rnn() -> tuple[MnistRNN, DataLoader, DataLoader]:
    torch.manual_seed(1)  # the script seeds, then builds its loaders, then the model
    train_loader, test_loader = mnist_rnn_data()
    return MnistRNN(), train_loader, test_loader


def original_mnist_rnn(precision: str, dry_run: bool, epochs: int = 2) -> MnistRNN:
    model, train_loader, test_loader = make_mnist_rnn()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    def train() -> None:
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            with autocast():
                loss = F.nll_loss(model(data), target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if batch_idx % 10 == 0 and dry_run:
                break

    def test() -> None:
        model.eval()
        test_loss, correct = 0.0, 0
        with torch.no_grad():
            for data, target in test_loader:
                with autocast():
                    output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
                if dry_run:
                    break
        model.results.append((test_loss / len(test_loader.dataset), correct))

    for _ in range(epochs):
        train()
        test()
        scheduler.step()
    return model
