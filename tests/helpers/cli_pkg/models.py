"""Modules named by class_path in the config tests."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from trainer import Callback, Module


class Encoder(torch.nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.width = width
        self.net = torch.nn.Linear(4, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.net(x))


class TinyClassifier(Module):
    """4 features -> 3 classes; `encoder` may be given as a nested class_path."""

    def __init__(self, hidden: int = 8, lr: float = 0.1, encoder: torch.nn.Module | None = None, scale=1.0) -> None:
        super().__init__()
        self.lr, self.scale = lr, scale
        self.encoder = encoder if encoder is not None else Encoder(hidden)
        self.head = torch.nn.Linear(getattr(self.encoder, "width", hidden), 3)
        self.hparams = {"hidden": hidden, "lr": lr}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x).float(), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self(x).float(), y), batch_size=len(y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test/loss", F.cross_entropy(self(x).float(), y), batch_size=len(y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(dim=1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Buggy(TinyClassifier):
    """Raises inside training_step: a bug in user code, which must keep its traceback."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise RuntimeError("bug in user code")


class NotAModule:
    def __init__(self, hidden: int = 1) -> None:
        self.hidden = hidden


def make_model(hidden: int = 8) -> TinyClassifier:
    return TinyClassifier(hidden=hidden)


class CountSteps(Callback):
    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.seen = 0

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        self.seen += 1


class FailingCallback(Callback):
    """A bug in user code while the config's objects are built: it must keep its traceback."""

    def __init__(self) -> None:
        raise ValueError("bug in a callback's __init__")


class Scheduled(TinyClassifier):
    """TinyClassifier whose own configure_optimizers returns SGD with momentum and a StepLR:
    the reference for the config's `optimizer:` / `lr_scheduler:` sections."""

    def __init__(self, hidden: int = 8, lr: float = 0.1, momentum: float = 0.9, step_size: int = 1, gamma: float = 0.5) -> None:
        super().__init__(hidden=hidden, lr=lr)
        self.momentum, self.step_size, self.gamma = momentum, step_size, gamma

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=self.step_size, gamma=self.gamma)]


class NoOptimizers(TinyClassifier):
    """A module that leaves configure_optimizers to the config (Module's own raises)."""

    configure_optimizers = Module.configure_optimizers
