"""pytorch/examples' time_sequence_prediction at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_time_sequence_prediction.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

Two LSTMCells in float64, LBFGS(lr=0.8) over the whole training set once per "step", then a
test pass under no_grad that also predicts `FUTURE` values past the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers.examples import autocast_for
from trainer import Module


FUTURE = 6


TSP_STEPS = 3


def sine_waves(n: int = 7, length: int = 24, period: int = 20) -> np.ndarray:
    """generate_sine_wave.py at a smaller size (its own seed, 2)."""
    rs = np.random.RandomState(2)
    x = np.arange(length) + rs.randint(-4 * period, 4 * period, n).reshape(n, 1)
    return np.sin(x / 1.0 / period).astype("float64")


def tsp_data() -> tuple[list[Any], list[Any]]:
    data = sine_waves()
    train = (torch.from_numpy(data[3:, :-1]), torch.from_numpy(data[3:, 1:]))
    test = (torch.from_numpy(data[:3, :-1]), torch.from_numpy(data[:3, 1:]))
    return [train], [test]


class Sequence(Module):
    def __init__(self, hidden: int = 10) -> None:
        super().__init__()
        self.automatic_optimization = False  # LBFGS evaluates the loss itself: a closure
        self.hidden_size = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)
        self.losses: list[float] = []       # the script prints every closure's loss
        self.test_losses: list[float] = []  # and the test loss after every step

    def forward(self, input: torch.Tensor, future: int = 0) -> torch.Tensor:
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        c_t = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), self.hidden_size, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)

    def test_loss(self, batch: Any) -> torch.Tensor:
        test_input, test_target = batch
        pred = self(test_input, future=FUTURE)
        return F.mse_loss(pred[:, :-FUTURE], test_target)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        input, target = batch
        opt = self.optimizers()

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = F.mse_loss(self(input), target)
            self.losses.append(loss.item())
            self.manual_backward(loss)
            return loss

        opt.step(closure=closure)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.test_losses.append(self.test_loss(batch).item())

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.8)


def make_sequence() -> Sequence:
    np.random.seed(0)
    torch.manual_seed(0)
    return Sequence().double()


def original_time_sequence(precision: str, steps: int = TSP_STEPS) -> Sequence:
    seq = make_sequence()
    (train,), (test,) = tsp_data()
    input, target = train
    autocast = autocast_for(precision)
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
    for _ in range(steps):
        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            with autocast():
                loss = F.mse_loss(seq(input), target)
            seq.losses.append(loss.item())
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad(), autocast():
            seq.test_losses.append(seq.test_loss(test).item())
    return seq
