"""pytorch/examples' mnist_forward_forward at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_mnist_forward_forward.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

Hinton's forward-forward: each layer trained alone (its own Adam) for EPOCHS full-batch
steps on positive (true label overlaid) and negative (wrong label) data, then its detached
outputs feed the next layer. The error is read by overlaying each label and summing the
layers' goodness. The script draws the negative labels with torch.randint.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module


FF_EPOCHS, FF_THRESHOLD, FF_LR = 5, 2.0, 0.03


def overlay_y_on_x(x: torch.Tensor, y: Any, classes: int = 10) -> torch.Tensor:
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


def get_y_neg(y: torch.Tensor) -> torch.Tensor:
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(int(y_samp.item()))
        y_neg[idx] = torch.tensor(allowed_indices)[torch.randint(len(allowed_indices), size=(1,))].item()
    return y_neg


class FFLayer(nn.Linear):
    """The example's `Layer`, less its `train(x_pos, x_neg)`: that name is `nn.Module.train(mode)`,
    which `model.train()` calls on every submodule once the layers are registered (the example
    keeps them in a plain list, so they never are); the ports call it `goodness_loss`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return F.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def goodness_loss(self, x_pos: torch.Tensor, x_neg: torch.Tensor) -> torch.Tensor:
        g_pos = self.forward(x_pos).float().pow(2).mean(1)
        g_neg = self.forward(x_neg).float().pow(2).mean(1)
        return torch.log1p(torch.exp(torch.cat([-g_pos + FF_THRESHOLD, g_neg - FF_THRESHOLD]))).mean()


class FFNet(Module):
    def __init__(self, dims: tuple[int, ...] = (36, 20, 20)) -> None:
        super().__init__()
        self.automatic_optimization = False  # one optimizer per layer, each trained on its own
        self.layers = nn.ModuleList([FFLayer(dims[d], dims[d + 1]) for d in range(len(dims) - 1)])
        self.losses: list[float] = []
        self.errors: list[float] = []
        self.h: tuple[torch.Tensor, torch.Tensor] | None = None

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.float().pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        return torch.cat(goodness_per_label, 1).argmax(1)

    def error(self, x: torch.Tensor, y: torch.Tensor) -> float:
        return 1.0 - self.predict(x).eq(y).float().mean().item()

    # The port: epoch l trains layer l, one batch (the whole set) per step.
    def training_step(self, batch: Any, batch_idx: int) -> None:
        layer_idx = self.current_epoch
        if batch_idx == 0:
            if layer_idx == 0:
                self.h = batch
            else:  # what the previous layer's train() returned
                assert self.h is not None
                previous = self.layers[layer_idx - 1]
                self.h = (previous(self.h[0]).detach(), previous(self.h[1]).detach())
        assert self.h is not None
        opt = self.optimizers()[layer_idx]
        loss = self.layers[layer_idx].goodness_loss(*self.h)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.losses.append(loss.item())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.errors.append(self.error(*batch))

    def configure_optimizers(self) -> Any:
        return [torch.optim.Adam(layer.parameters(), lr=FF_LR) for layer in self.layers]


def ff_data() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(4)
    train = torch.utils.data.TensorDataset(torch.randn(40, 36, generator=g), torch.randint(0, 10, (40,), generator=g))
    test = torch.utils.data.TensorDataset(torch.randn(20, 36, generator=g), torch.randint(0, 10, (20,), generator=g))
    return DataLoader(train, batch_size=40), DataLoader(test, batch_size=20)


def make_ff() -> tuple[FFNet, tuple[torch.Tensor, ...], DataLoader]:
    """Model, then the first (only) training batch, then the negative labels, as the script."""
    torch.manual_seed(1)  # the script parses --seed but never seeds; both versions seed here
    train_loader, test_loader = ff_data()
    net = FFNet()
    x, y = next(iter(train_loader))
    x_pos = overlay_y_on_x(x, y)
    x_neg = overlay_y_on_x(x, get_y_neg(y))
    return net, (x, y, x_pos, x_neg), test_loader


def original_ff(precision: str) -> FFNet:
    net, (x, y, x_pos, x_neg), test_loader = make_ff()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    h_pos, h_neg = x_pos, x_neg
    for layer in net.layers:
        opt = torch.optim.Adam(layer.parameters(), lr=FF_LR)
        for _ in range(FF_EPOCHS):
            with autocast():
                loss = layer.goodness_loss(h_pos, h_neg)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            net.losses.append(loss.item())
        with autocast():
            h_pos, h_neg = layer(h_pos).detach(), layer(h_neg).detach()
    with torch.no_grad(), autocast():
        net.errors.append(net.error(x, y))
    x_te, y_te = next(iter(test_loader))
    with torch.no_grad(), autocast():
        net.errors.append(net.error(x_te, y_te))
    return net
