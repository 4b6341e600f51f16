"""recipes_source/recipes/amp_recipe.py at toy size (on the CPU: float16 autocast and a GradScaler).

The recipe's network is `make_model`: `num_layers` Linear+ReLU pairs and a last Linear, MSE
loss, SGD at 1e-3; its data are lists of random inputs and targets read with
`zip(data, targets)`, the same every epoch. Its loops: default precision; "all together"
(autocast around the forward and loss, `scaler.scale(loss).backward()`, `scaler.step`,
`scaler.update`, then `opt.zero_grad()`); and the same with `scaler.unscale_(opt)` and
`clip_grad_norm_(net.parameters(), max_norm=0.1)` before the step. The port: the `(input,
target)` pairs as they are, `precision="amp"` (or fp32), `gradient_clip_val=0.1`. Sizes:
width 32 instead of 4096, batches of 16, 6 batches, 3 epochs.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module

BATCH_SIZE, IN_SIZE, OUT_SIZE, NUM_LAYERS, NUM_BATCHES, EPOCHS = 16, 32, 32, 3, 6, 3


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = []
        for _ in range(NUM_LAYERS - 1):
            layers.append(torch.nn.Linear(IN_SIZE, IN_SIZE))
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(IN_SIZE, OUT_SIZE))
        self.net = torch.nn.Sequential(*tuple(layers))
        self.loss_fn = torch.nn.MSELoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        input, target = batch
        return self.loss_fn(self(input), target)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.001)


def data(device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The recipe makes its data on the device it trains on."""
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(BATCH_SIZE, IN_SIZE, generator=g).to(device) for _ in range(NUM_BATCHES)]
    targets = [torch.randn(BATCH_SIZE, OUT_SIZE, generator=g).to(device) for _ in range(NUM_BATCHES)]
    return list(zip(inputs, targets))


def original(precision: str, clip: float | None = None, epochs: int = EPOCHS,
             device: str = "cpu") -> tuple[Net, torch.amp.GradScaler]:
    torch.manual_seed(0)
    net = Net().to(device)
    opt = net.configure_optimizers()
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    if device != "cpu":
        dtype = {"fp32": torch.float32, "amp": torch.float16, "bf16": torch.bfloat16}[precision]
        autocast = lambda: torch.autocast(device, dtype=dtype, enabled=precision != "fp32")  # noqa: E731
        scaler = torch.amp.GradScaler(device, enabled=precision == "amp")
    for _ in range(epochs):
        for input, target in data(device):
            with autocast():
                output = net(input)
                loss = net.loss_fn(output, target)
            scaler.scale(loss).backward()
            if clip is not None:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=clip)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    return net, scaler
