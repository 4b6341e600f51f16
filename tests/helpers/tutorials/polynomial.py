"""beginner_source/examples_nn/polynomial_nn.py, polynomial_optim.py and polynomial_module.py:
a third-order polynomial fitted to sin(x) on the whole data at every step.

No loader: each iteration runs the model on all of `x` (or the features `xx = (x, x^2, x^3)`),
prints `t, loss.item()` every `PRINT_EVERY` iterations (the loss computed before the
gradients are zeroed), and updates: by hand (`param -= learning_rate * param.grad` after
`model.zero_grad()`), with RMSprop, or with SGD on a module of four scalar parameters. The
port trains on the same full batch at every step (`itertools.repeat((xx, y))`, with
`max_steps`). Sizes: the tutorials' 2000 points, 60 iterations instead of 2000.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import torch

from tests.helpers.tutorials.nn_tutorial import ByHand
from trainer import Module

N_ITERS, PRINT_EVERY = 60, 20
x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)
xx = x.unsqueeze(-1).pow(torch.tensor([1, 2, 3]))


class Polynomial(Module):
    """`variant`: "nn" (Linear + Flatten, update by hand), "optim" (the same with RMSprop) or
    "module" (`Polynomial3`'s four scalars with SGD)."""

    def __init__(self, variant: str) -> None:
        super().__init__()
        self.variant = variant
        if variant == "module":
            self.a, self.b = torch.nn.Parameter(torch.randn(())), torch.nn.Parameter(torch.randn(()))
            self.c, self.d = torch.nn.Parameter(torch.randn(())), torch.nn.Parameter(torch.randn(()))
        else:
            self.model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
        self.loss_fn = torch.nn.MSELoss(reduction="sum")
        self.printed: list[tuple[int, float]] = []

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.variant == "module":
            return self.a + self.b * inputs + self.c * inputs ** 2 + self.d * inputs ** 3
        return self.model(inputs)

    def step_loss(self, t: int) -> torch.Tensor:
        loss = self.loss_fn(self(x if self.variant == "module" else xx), y)
        if t % PRINT_EVERY == PRINT_EVERY - 1:
            self.printed.append((t, loss.item()))
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        loss = self.loss_fn(self(inputs), target)
        if batch_idx % PRINT_EVERY == PRINT_EVERY - 1:
            self.printed.append((batch_idx, loss.item()))
        return loss

    def configure_optimizers(self) -> Any:
        if self.variant == "optim":
            return torch.optim.RMSprop(self.parameters(), lr=1e-3)
        if self.variant == "module":
            return torch.optim.SGD(self.parameters(), lr=1e-6)
        return ByHand(self.parameters(), lr=1e-6)


def full_batch(variant: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    return itertools.repeat((x if variant == "module" else xx, y))


def original(variant: str) -> Polynomial:
    torch.manual_seed(0)
    model = Polynomial(variant)
    learning_rate = 1e-6
    optimizer = None if variant == "nn" else model.configure_optimizers()
    for t in range(N_ITERS):
        loss = model.step_loss(t)
        if optimizer is None:
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for param in model.parameters():
                    param -= learning_rate * param.grad  # type: ignore[misc, operator]
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model
