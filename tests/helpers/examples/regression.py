"""pytorch/examples' regression at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_regression.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

A Linear(4, 1) fit to a random degree-4 polynomial on fresh random batches drawn from the
global generator, the update written by hand (`param.data.add_(-0.1 * param.grad)`), and a
stop once a batch's loss is below 1e-3. The script loops forever (`count(1)`); both
versions here stop at REGRESSION_CAP batches at the latest.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers.examples import autocast_for
from trainer import Module


POLY_DEGREE = 4


REGRESSION_CAP = 600


class Polynomial:
    """The script's module-level target, drawn from the global generator after the seed."""

    def __init__(self) -> None:
        self.W_target = torch.randn(POLY_DEGREE, 1) * 5
        self.b_target = torch.randn(1) * 5

    @staticmethod
    def make_features(x: torch.Tensor) -> torch.Tensor:
        x = x.unsqueeze(1)
        return torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)

    def f(self, x: torch.Tensor) -> torch.Tensor:
        return x.mm(self.W_target) + self.b_target.item()

    def get_batch(self, batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        random = torch.randn(batch_size)
        x = self.make_features(random)
        return x, self.f(x)


class Regression(Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False  # the script updates the parameters by hand
        self.fc = nn.Linear(POLY_DEGREE, 1)
        self.batches, self.last_loss = 0, math.inf

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        batch_x, batch_y = batch
        self.fc.zero_grad()
        output = F.smooth_l1_loss(self.fc(batch_x).float(), batch_y)
        loss = output.item()
        self.manual_backward(output)
        for param in self.fc.parameters():
            assert param.grad is not None
            param.data.add_(-0.1 * param.grad)
        self.batches, self.last_loss = batch_idx + 1, loss
        if loss < 1e-3:  # the script's stop criterion: `break`
            self.trainer.should_stop = True
        return output.detach()

    def configure_optimizers(self) -> None:
        return None  # no optimizer: the update above is the script's own


class PolynomialBatches:
    """The script's endless `get_batch()` as a loader: each batch drawn when it is asked for."""

    def __init__(self, target: Polynomial, cap: int = REGRESSION_CAP) -> None:
        self.target, self.cap = target, cap

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(self.cap):
            yield self.target.get_batch()


def make_regression() -> tuple[Regression, Polynomial]:
    torch.manual_seed(3)  # the script has no seed; both versions use this one (converges in 252 batches)
    target = Polynomial()
    return Regression(), target


def original_regression(precision: str) -> Regression:
    model, target = make_regression()
    fc, autocast = model.fc, autocast_for(precision)
    for batch_idx in range(1, REGRESSION_CAP + 1):
        batch_x, batch_y = target.get_batch()
        fc.zero_grad()
        with autocast():
            output = F.smooth_l1_loss(fc(batch_x).float(), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            assert param.grad is not None
            param.data.add_(-0.1 * param.grad)
        model.batches, model.last_loss = batch_idx, loss
        if loss < 1e-3:
            break
    return model
