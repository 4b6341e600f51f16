"""pytorch/examples' mnist at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_mnist.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

The mnist script as it is now: its loss is printed every `log_interval` batches, where
--dry-run breaks (so after the first batch of every epoch); the test pass always runs in
full. On an accelerator both loaders get num_workers=1, persistent_workers=True and
shuffle=True (pin_memory left out: no accelerator here). `MnistNet` and `mnist_data` also
run through `train_test_original` (the loop mnist and vae share, in `__init__`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.examples import amp_step, autocast_for, scaler_for
from trainer import Module


class MnistNet(Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, 1)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(128, 16)
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.fc2(self.dropout2(x))
        return F.log_softmax(x.float(), dim=1)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.nll_loss(self(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adadelta(self.parameters(), lr=1.0)
        return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


def mnist_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(64, 1, 12, 12, generator=g), torch.randint(0, 10, (64,), generator=g))
    test = TensorDataset(torch.randn(24, 1, 12, 12, generator=g), torch.randint(0, 10, (24,), generator=g))
    return DataLoader(train, batch_size=8, shuffle=True), DataLoader(test, batch_size=10)


LOG_INTERVAL = 3


def make_mnist(accel: bool) -> tuple[Module, DataLoader, DataLoader]:
    class Net(MnistNet):
        def __init__(self) -> None:
            super().__init__()
            self.train_losses: list[float] = []
            self.results: list[tuple[float, int]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self.loss(batch)
            if batch_idx % LOG_INTERVAL == 0:
                self.train_losses.append(loss.item())
            return loss

        def on_validation_epoch_start(self) -> None:
            self.test_loss, self.correct = 0.0, 0

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.test_batch(batch)

        def test_batch(self, batch: Any) -> None:
            data, target = batch
            output = self(data)
            self.test_loss += F.nll_loss(output, target, reduction="sum").item()
            self.correct += output.argmax(dim=1, keepdim=True).eq(target.view(-1, 1)).sum().item()

        def on_validation_epoch_end(self) -> None:
            self.results.append((self.test_loss / len(self.trainer.val_dataloaders.dataset), self.correct))

    torch.manual_seed(1)
    train, test = mnist_data()
    if accel:
        kwargs = dict(num_workers=1, persistent_workers=True, shuffle=True)
        train = DataLoader(train.dataset, batch_size=8, **kwargs)
        test = DataLoader(test.dataset, batch_size=10, **kwargs)
    return Net(), train, test


def original_mnist(precision: str, dry_run: bool, accel: bool, epochs: int = 2) -> Any:
    model, train_loader, test_loader = make_mnist(accel)
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizer, scheduler = model.configure_optimizers()
    for _ in range(epochs):
        model.train()
        for batch_idx, batch in enumerate(train_loader):
            optimizer.zero_grad()
            with autocast():
                loss = model.loss(batch)
            amp_step(scaler, optimizer, loss)
            if batch_idx % LOG_INTERVAL == 0:
                model.train_losses.append(loss.item())
                if dry_run:
                    break
        model.eval()
        model.on_validation_epoch_start()
        with torch.no_grad():
            for batch in test_loader:
                with autocast():
                    model.test_batch(batch)
        model.results.append((model.test_loss / len(test_loader.dataset), model.correct))
        scheduler.step()
    return model
