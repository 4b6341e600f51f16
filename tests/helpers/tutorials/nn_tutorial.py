"""beginner_source/nn_tutorial.py ("What is torch.nn really?") at toy size.

The tutorial refactors one training loop step by step; the steps that train differently are
kept here, each with its model:
- `Mnist_Logistic` with its own `weights`/`bias` parameters, trained by `fit_by_hand`: slices
  of the unshuffled tensors, and the hand-written update `p -= p.grad * lr` under `no_grad`
  followed by `model.zero_grad()`;
- `fit(epochs, model, loss_func, opt, train_dl, valid_dl)` with `loss_batch` (loss, backward,
  step, zero_grad), a shuffled training loader and an unshuffled validation loader of twice
  the batch size, printing `epoch, val_loss` with the loss weighted by the batch sizes in
  NumPy; its models: `nn.Linear` logistic regression with SGD, `Mnist_CNN` with SGD and
  momentum, an `nn.Sequential` with a `Lambda` reshaping layer, and the same without it, fed
  by a `WrappedDataLoader` that reshapes each batch (`preprocess`), with adaptive pooling.
Sizes: 16x16 images instead of 28x28, 48 training and 20 validation images, batches of 8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.examples import autocast_for
from trainer import Module

SIDE, BS, LR, EPOCHS = 16, 8, 0.5, 2
loss_func = F.cross_entropy


def mnist_like() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flattened images in [0, 1) and their digits, as the tutorial's pickled MNIST."""
    g = torch.Generator().manual_seed(0)
    return (torch.rand(48, SIDE * SIDE, generator=g), torch.randint(0, 10, (48,), generator=g),
            torch.rand(20, SIDE * SIDE, generator=g), torch.randint(0, 10, (20,), generator=g))


class Tutorial(Module):
    """What every port below shares: the loss, and `fit`'s validation print."""

    def __init__(self) -> None:
        super().__init__()
        self.printed: list[tuple[int, float]] = []
        self.lr = LR

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        xb, yb = batch
        return loss_func(self(xb).float(), yb)

    def on_validation_epoch_start(self) -> None:
        self.losses: list[tuple[float, int]] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        xb, yb = batch
        loss = loss_func(self(xb).float(), yb)
        self.log("val_loss", loss)
        self.losses.append((loss.item(), len(xb)))

    def on_validation_epoch_end(self) -> None:
        self.print_val_loss(self.current_epoch, self.losses)

    def print_val_loss(self, epoch: int, batches: list[tuple[float, int]]) -> None:
        losses, nums = zip(*batches)
        self.printed.append((epoch, float(np.sum(np.multiply(losses, nums)) / np.sum(nums))))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Mnist_Logistic(Tutorial):
    def __init__(self) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.randn(SIDE * SIDE, 10) / math.sqrt(SIDE * SIDE))
        self.bias = nn.Parameter(torch.zeros(10))

    def forward(self, xb: torch.Tensor) -> torch.Tensor:
        return xb @ self.weights + self.bias


class Linear_Logistic(Tutorial):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(SIDE * SIDE, 10)

    def forward(self, xb: torch.Tensor) -> torch.Tensor:
        return self.lin(xb)


class Mnist_CNN(Tutorial):
    def __init__(self) -> None:
        super().__init__()
        self.lr = 0.1
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

    def forward(self, xb: torch.Tensor) -> torch.Tensor:
        xb = xb.view(-1, 1, SIDE, SIDE)
        xb = F.relu(self.conv1(xb))
        xb = F.relu(self.conv2(xb))
        xb = F.relu(self.conv3(xb))
        xb = F.avg_pool2d(xb, SIDE // 8)
        return xb.view(-1, xb.size(1))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class Lambda(nn.Module):
    def __init__(self, func: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.func = func

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.func(x)


class Sequential_CNN(Mnist_CNN):
    """The tutorial's `nn.Sequential` model, held by the port as `self.model`; `adaptive`: the
    last version, which reshapes nothing itself (the `WrappedDataLoader` does)."""

    def __init__(self, adaptive: bool) -> None:
        Tutorial.__init__(self)
        self.lr = 0.1
        first = [] if adaptive else [Lambda(lambda x: x.view(-1, 1, SIDE, SIDE))]
        pool = nn.AdaptiveAvgPool2d(1) if adaptive else nn.AvgPool2d(SIDE // 8)
        self.model = nn.Sequential(
            *first,
            nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1), nn.ReLU(),
            pool, Lambda(lambda x: x.view(x.size(0), -1)))

    def forward(self, xb: torch.Tensor) -> torch.Tensor:
        return self.model(xb)


MODELS: dict[str, Callable[[], Tutorial]] = {
    "logistic": Linear_Logistic, "cnn": Mnist_CNN, "sequential": lambda: Sequential_CNN(adaptive=False),
    "wrapped": lambda: Sequential_CNN(adaptive=True)}


def preprocess(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.view(-1, 1, SIDE, SIDE), y


class WrappedDataLoader:
    def __init__(self, dl: DataLoader, func: Callable[..., Any]) -> None:
        self.dl = dl
        self.func = func

    def __len__(self) -> int:
        return len(self.dl)

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self.dl)
        for b in batches:
            yield (self.func(*b))


def preprocess_to(dev: str) -> Callable[..., Any]:
    """The tutorial's "Using your GPU" `preprocess`: the batch reshaped and moved to `dev`."""
    def preprocess(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.view(-1, 1, SIDE, SIDE).to(dev), y.to(dev)
    return preprocess


def get_data(train_ds: TensorDataset, valid_ds: TensorDataset, bs: int, wrapped: bool,
             dev: str = "cpu") -> tuple[Any, Any]:
    train_dl, valid_dl = DataLoader(train_ds, batch_size=bs, shuffle=True), DataLoader(valid_ds, batch_size=bs * 2)
    if wrapped:
        func = preprocess if dev == "cpu" else preprocess_to(dev)
        return WrappedDataLoader(train_dl, func), WrappedDataLoader(valid_dl, func)
    return train_dl, valid_dl


def make(name: str, dev: str = "cpu") -> tuple[Tutorial, Any, Any]:
    torch.manual_seed(0)
    x_train, y_train, x_valid, y_valid = mnist_like()
    model = MODELS[name]()
    train_dl, valid_dl = get_data(TensorDataset(x_train, y_train), TensorDataset(x_valid, y_valid), BS,
                                  wrapped=name == "wrapped", dev=dev)
    return model, train_dl, valid_dl


def original_fit(name: str, precision: str = "fp32", dev: str = "cpu") -> Tutorial:
    """The tutorial's `fit` with `loss_batch` (autocast around the forward and loss for bf16);
    on `dev`, the model moved there and `preprocess` moving each batch (its "Using your GPU")."""
    model, train_dl, valid_dl = make(name, dev)
    model.to(dev)
    opt = model.configure_optimizers()
    autocast = autocast_for(precision)
    if dev != "cpu":
        autocast = lambda: torch.autocast(dev, dtype=torch.bfloat16, enabled=precision == "bf16")  # noqa: E731

    def loss_batch(xb: torch.Tensor, yb: torch.Tensor, opt: torch.optim.Optimizer | None = None) -> tuple[float, int]:
        with autocast():
            loss = loss_func(model(xb).float(), yb)
        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad()
        return loss.item(), len(xb)

    for epoch in range(EPOCHS):
        model.train()
        for xb, yb in train_dl:
            loss_batch(xb, yb, opt)
        model.eval()
        with torch.no_grad():
            model.print_val_loss(epoch, [loss_batch(xb, yb) for xb, yb in valid_dl])
    return model


class ByHand(torch.optim.Optimizer):
    """The tutorial's hand-written update as an optimizer, so the port keeps its arithmetic:
    `p -= p.grad * lr` rounds the product first, where `SGD` computes `p + (-lr) * grad` in one
    fused multiply-add and ends in other last bits."""

    def __init__(self, params: Any, lr: float) -> None:
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p -= p.grad * group["lr"]
        return loss


class ByHandLogistic(Mnist_Logistic):
    def configure_optimizers(self) -> Any:
        return ByHand(self.parameters(), lr=self.lr)


def logistic_data() -> DataLoader:
    x_train, y_train, _, _ = mnist_like()
    return DataLoader(TensorDataset(x_train, y_train), batch_size=BS)


def original_fit_by_hand(lr: float = LR) -> Mnist_Logistic:
    """The tutorial's first `fit()`: slices of the unshuffled tensors, the update by hand."""
    torch.manual_seed(0)
    model = Mnist_Logistic()
    x_train, y_train, _, _ = mnist_like()
    n, bs = len(x_train), BS
    for _ in range(EPOCHS):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= p.grad * lr  # type: ignore[misc, operator]
                model.zero_grad()
    return model
