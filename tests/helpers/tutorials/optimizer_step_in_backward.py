"""intermediate_source/optimizer_step_in_backward_tutorial.py ("How to save memory by fusing
the optimizer step into the backward pass"), at toy size: the tutorial's loop (`original`) and
two ports to a LightningModule (`main`), written with this package's imports so that
`load_file` runs them under Lightning too.

The tutorial: one `Adam([p], foreach=False)` per parameter, stepped and zeroed by a hook
registered with `p.register_post_accumulate_grad_hook`, so each parameter is updated as soon
as its gradient is ready and `train()` is only a forward and `loss.sum().backward()`.

* `way="hooks"`: the tutorial's code as it is. `configure_optimizers` builds the dict of
  optimizers, registers the hooks and returns None: the Trainer runs `training_step` and
  backward, the hooks step (the Trainer warns that it has no optimizer of its own). Nothing of
  the optimizers' state is in a checkpoint.
* `way="manual"`: manual optimization; `configure_optimizers` returns the per-parameter
  optimizers (so checkpoints hold their states) and the hooks, registered in `on_train_start`,
  step them through `self.optimizers()` (so `global_step` counts every step, one per parameter
  and batch); `training_step` calls `self.manual_backward(loss.sum())`.

Differences from the tutorial: a small convolutional net instead of torchvision's ViT, 8x8
images instead of 224x224, drawn once before training (the tutorial draws one inside each
`train()`; a port has them in a loader); no CUDA memory snapshots.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

import trainer as L

IMAGE_SIZE = 8
STEPS = 3


class Net(L.LightningModule):
    def __init__(self, way: str = "hooks") -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * (IMAGE_SIZE - 2) ** 2, 5)
        self.way = way
        self.automatic_optimization = way == "hooks"
        self.handles: list[Any] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))

    def fuse(self, optimizer_dict: dict[nn.Parameter, Any]) -> None:
        """The tutorial's hook on every parameter (any registered before is removed first)."""
        for handle in self.handles:
            handle.remove()

        def optimizer_hook(parameter: nn.Parameter) -> None:
            optimizer_dict[parameter].step()
            optimizer_dict[parameter].zero_grad()

        self.handles = [p.register_post_accumulate_grad_hook(optimizer_hook) for p in self.parameters()]

    # the ports
    def configure_optimizers(self) -> Any:
        optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in self.parameters()}
        if self.way == "hooks":
            self.fuse(optimizer_dict)
            return None
        return list(optimizer_dict.values())

    def on_train_start(self) -> None:
        if self.way == "manual":
            self.fuse(dict(zip(self.parameters(), self.optimizers(), strict=True)))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> Any:
        loss = self(batch)
        if self.automatic_optimization:
            return loss.sum()
        self.manual_backward(loss.sum())
        return None


def images() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.rand(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g) for _ in range(STEPS)]


def original(precision: str = "fp32") -> Net:
    """The tutorial's loop; under "bf16" with autocast around the forward, under "amp" also
    with a GradScaler: the hooks step through `scaler.step(optimizer)` and the loop calls
    `scaler.update()` after each backward (PyTorch's AMP recipe, the tutorial has none)."""
    torch.manual_seed(0)
    model = Net()
    optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    if precision == "amp":
        model.fuse({p: _Scaled(scaler, optimizer) for p, optimizer in optimizer_dict.items()})
    else:
        model.fuse(optimizer_dict)
    dtype = {"bf16": torch.bfloat16, "amp": torch.float16}.get(precision)

    def train(model: Net, fake_image: torch.Tensor) -> None:
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = model.forward(fake_image)
        scaler.scale(loss.sum()).backward()
        scaler.update()

    for fake_image in images():
        train(model, fake_image)
    return model


class _Scaled:
    """An optimizer stepped through a GradScaler (`step` is `scaler.step(optimizer)`)."""

    def __init__(self, scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> None:
        self.scaler, self.optimizer = scaler, optimizer

    def step(self) -> None:
        self.scaler.step(self.optimizer)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()


def main(way: str, **options: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Net(way)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", **options)
    trainer.fit(model, DataLoader(images(), batch_size=None))  # type: ignore[arg-type]
    return {"model": model, "trainer": trainer}
