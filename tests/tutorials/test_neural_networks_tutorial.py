"""beginner_source/blitz/neural_networks_tutorial.py ("Neural Networks"), ported to a `Module`.

The tutorial builds a LeNet-like `Net` (conv 1->6->16, three linear layers), one random
32x32 input and a random target, `nn.MSELoss`, and updates the weights two ways:
"simple python code" (`f.data.sub_(f.grad.data * learning_rate)` after `net.zero_grad()`
and `loss.backward()`), then `optim.SGD(net.parameters(), lr=0.01)` "in your training loop"
(`zero_grad`, forward, loss, backward, step). Both are repeated here for `STEPS` steps on the
tutorial's one input (a loader that yields it `STEPS` times):
- with `torch.optim.SGD`, the port is an automatic-optimization `Module`;
- with the hand-written update, the port uses manual optimization and no optimizer
  (`configure_optimizers` returns None), with the tutorial's update in `training_step`.
Both end on the tutorial's weights (`torch.equal`). `Net` is the tutorial's, unchanged.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
STEPS = 6
learning_rate = 0.01


class Net(Module):
    def __init__(self, by_hand: bool = False) -> None:
        super().__init__()
        # 1 input image channel, 6 output channels, 5x5 square convolution kernel
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)  # 5*5 from image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.criterion = nn.MSELoss()
        self.automatic_optimization = not by_hand

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        c1 = F.relu(self.conv1(input))
        s2 = F.max_pool2d(c1, (2, 2))
        c3 = F.relu(self.conv2(s2))
        s4 = F.max_pool2d(c3, 2)
        s4 = torch.flatten(s4, 1)
        f5 = F.relu(self.fc1(s4))
        f6 = F.relu(self.fc2(f5))
        output = self.fc3(f6)
        return output

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        input, target = batch
        if self.automatic_optimization:
            return self.criterion(self(input), target)
        self.zero_grad()  # the tutorial's net.zero_grad()
        loss = self.criterion(self(input), target)
        self.manual_backward(loss)
        for f in self.parameters():
            f.data.sub_(f.grad.data * learning_rate)
        return None

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=0.01) if self.automatic_optimization else None


def the_input() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    input = torch.randn(1, 1, 32, 32)
    target = torch.randn(10).view(1, -1)  # a dummy target, for example; the same shape as output
    return input, target


def original(by_hand: bool, steps: int = STEPS) -> Net:
    input, target = the_input()
    net = Net()
    criterion = nn.MSELoss()
    if by_hand:
        for _ in range(steps):
            net.zero_grad()
            loss = criterion(net(input), target)
            loss.backward()
            for f in net.parameters():
                f.data.sub_(f.grad.data * learning_rate)
        return net
    optimizer = optim.SGD(net.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()   # zero the gradient buffers
        output = net(input)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()    # Does the update
    return net


def ported(by_hand: bool, steps: int = STEPS) -> tuple[Net, Trainer]:
    input, target = the_input()
    net = Net(by_hand=by_hand)
    trainer = Trainer(max_epochs=1, **QUIET)
    loader = DataLoader(TensorDataset(input.expand(steps, 1, 32, 32), target.expand(steps, 10)), batch_size=1)
    trainer.fit(net, loader)
    return net, trainer


@pytest.mark.parametrize("by_hand", [False, True], ids=["torch.optim.SGD", "f.data.sub_"])
def test_the_port_trains_to_the_tutorials_weights(by_hand: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net, trainer = ported(by_hand)
    # without an optimizer, Lightning's warning, which says what the update written in training_step does
    messages = [str(w.message) for w in caught if "returned None" in str(w.message)]
    assert len(messages) == by_hand
    if by_hand:
        assert "weights do not change" not in messages[0]
        assert "change only where training_step changes them" in messages[0]
    assert_same_weights(net, original(by_hand))
    assert trainer.global_step == (0 if by_hand else STEPS)  # manual optimization counts optimizer steps only


@pytest.mark.filterwarnings("ignore:configure_optimizers:UserWarning")
def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported(by_hand=True, steps=STEPS - 1)[0], original(by_hand=True))
