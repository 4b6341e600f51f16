"""beginner_source/basics/quickstart_tutorial.py and optimization_tutorial.py at toy size.

Both tutorials share the model (`NeuralNetwork`: flatten, three linear layers with ReLUs, the
quickstart's last ReLU included), `nn.CrossEntropyLoss`, plain SGD at 1e-3 and the loop:
`train_loop` computes the loss, *then* `zero_grad`, backward, step, and prints the loss every
`PRINT_EVERY` batches; `test_loop` sums the batch losses, divides by the number of batches,
counts the correct argmaxes over the dataset's size and prints both. Neither loader shuffles.
The optimization tutorial calls `model.train()`/`model.eval()` in its loops; the quickstart
calls only `model.eval()` (the model has no dropout, so both train the same). Sizes: images
8x8 instead of 28x28, hidden 32 instead of 512, 48 training and 20 test images.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module

PRINT_EVERY = 2  # the tutorials' 100
BATCH_SIZE = 8   # the tutorials' 64
LEARNING_RATE = 1e-3


class NeuralNetwork(Module):
    def __init__(self) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(8 * 8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10), nn.ReLU())
        self.loss_fn = nn.CrossEntropyLoss()
        self.printed: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_relu_stack(self.flatten(x))

    # The port: the tutorial's train_loop body, and its test_loop as validation.
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        X, y = batch
        loss = self.loss_fn(self(X).float(), y)
        if batch_idx % PRINT_EVERY == 0:
            self.print_loss(loss, batch_idx, len(X), len(self.trainer.train_dataloader.dataset))
        return loss

    def print_loss(self, loss: torch.Tensor, batch: int, n: int, size: int) -> None:
        self.printed.append(f"loss: {loss.item():>7f}  [{batch * n:>5d}/{size:>5d}]")

    def on_validation_epoch_start(self) -> None:
        self.test_loss, self.correct = 0.0, 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.test_batch(batch)

    def test_batch(self, batch: Any) -> None:
        X, y = batch
        pred = self(X).float()
        self.test_loss += self.loss_fn(pred, y).item()
        self.correct += (pred.argmax(1) == y).type(torch.float).sum().item()

    def on_validation_epoch_end(self) -> None:
        loader = self.trainer.val_dataloaders
        self.print_test(len(loader), len(loader.dataset))

    def print_test(self, num_batches: int, size: int) -> None:
        test_loss, correct = self.test_loss / num_batches, self.correct / size
        self.printed.append(f"Test Error: \n Accuracy: {(100 * correct):>0.1f}%, Avg loss: {test_loss:>8f} \n")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)


def fashion_mnist_like() -> tuple[DataLoader, DataLoader]:
    """FashionMNIST's shapes (1-channel images in [0, 1], ten classes), unshuffled loaders."""
    g = torch.Generator().manual_seed(0)
    training_data = TensorDataset(torch.rand(48, 1, 8, 8, generator=g), torch.randint(0, 10, (48,), generator=g))
    test_data = TensorDataset(torch.rand(20, 1, 8, 8, generator=g), torch.randint(0, 10, (20,), generator=g))
    return DataLoader(training_data, batch_size=BATCH_SIZE), DataLoader(test_data, batch_size=BATCH_SIZE)


def original(precision: str = "fp32", epochs: int = 3, call_train: bool = False, device: str = "cpu") -> NeuralNetwork:
    """The tutorials' loop (`call_train`: optimization_tutorial's `model.train()`), with
    autocast and a GradScaler for amp/bf16 as PyTorch's amp recipe adds them; on `device`
    as the tutorials run on a GPU (the model moved, each batch moved in the loops)."""
    torch.manual_seed(0)
    model = NeuralNetwork().to(device)
    train_dataloader, test_dataloader = fashion_mnist_like()
    optimizer = model.configure_optimizers()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    if device != "cpu":
        dtype = {"fp32": torch.float32, "amp": torch.float16, "bf16": torch.bfloat16}[precision]
        autocast = lambda: torch.autocast(device, dtype=dtype, enabled=precision != "fp32")  # noqa: E731
        scaler = torch.amp.GradScaler(device, enabled=precision == "amp")

    def train_loop(dataloader: DataLoader) -> None:
        size = len(dataloader.dataset)  # type: ignore[arg-type]
        if call_train:
            model.train()
        for batch, (X, y) in enumerate(dataloader):
            X, y = X.to(device), y.to(device)
            with autocast():
                pred = model(X)
                loss = model.loss_fn(pred.float(), y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if batch % PRINT_EVERY == 0:
                model.print_loss(loss, batch, len(X), size)

    def test_loop(dataloader: DataLoader) -> None:
        model.eval()
        model.on_validation_epoch_start()
        with torch.no_grad():
            for X, y in dataloader:
                with autocast():
                    model.test_batch((X.to(device), y.to(device)))
        model.print_test(len(dataloader), len(dataloader.dataset))  # type: ignore[arg-type]

    for _ in range(epochs):
        train_loop(train_dataloader)
        test_loop(test_dataloader)
    return model
