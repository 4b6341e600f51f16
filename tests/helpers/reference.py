"""A tiny model and the hand-written PyTorch loop every Trainer result is compared with.

The reference loop is what a careful engineer writes by hand (nanoGPT-style): autocast,
loss / window, GradScaler scale/backward, unscale_, clip, step, update, zero_grad.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}


class TinyNet(Module):
    """A small MLP with dropout, so RNG consumption matters for exactness."""

    def __init__(self, lr: float = 0.05, dropout: float = 0.1, optimizer: str = "sgd", scheduler: Any = None, blow_up_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
        )
        self.lr = lr
        self.optimizer_name = optimizer
        self.scheduler_spec = scheduler
        self.blow_up_at = set(blow_up_at)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x).float(), y)
        if self.calls in self.blow_up_at:  # inject a non-finite loss at a known micro-batch
            loss = loss * float("inf")
        self.calls += 1
        self.log("train/mse", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self(x).float(), y), batch_size=len(x))

    def configure_optimizers(self) -> Any:
        if self.optimizer_name == "adam":
            opt: torch.optim.Optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        else:
            opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        if self.scheduler_spec is None:
            return opt
        interval = self.scheduler_spec
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": interval}}


def make_data(n: int = 37, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = (x[:, :1] * 2 - x[:, 1:2]) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def make_model(seed: int = 0, **kwargs: Any) -> TinyNet:
    torch.manual_seed(seed)
    return TinyNet(**kwargs)


def loader(data: TensorDataset, batch_size: int = 4, shuffle: bool = True) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle)


def reference_fit(
    model: TinyNet,
    train_loader: DataLoader,
    *,
    precision: str = "fp32",
    epochs: int = 1,
    accumulate: int = 1,
    clip_val: float | None = None,
    clip_algorithm: str = "norm",
    scaler_kwargs: dict[str, Any] | None = None,
    on_step: Any = None,
) -> dict[str, Any]:
    """The hand-written loop. Returns counters and what the GradScaler did; `on_step(stepped,
    step_index)` runs after each optimizer step's zero_grad (an EMA update, ...)."""
    setup = model.configure_optimizers()
    if isinstance(setup, dict):
        opt, sched_spec = setup["optimizer"], setup["lr_scheduler"]
        sched, interval = sched_spec["scheduler"], sched_spec["interval"]
    else:
        opt, sched, interval = setup, None, None
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp", **(scaler_kwargs or {}))
    dtype = DTYPES[precision]
    steps = skipped = 0
    norms: list[float] = []
    model.train()
    for _ in range(epochs):
        n = len(train_loader)
        for i, batch in enumerate(train_loader):
            start = (i // accumulate) * accumulate
            window = min(accumulate, n - start)
            autocast = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with autocast:
                loss = model.training_step(batch, i)
            scaler.scale(loss / window).backward()
            if i - start + 1 < window:
                continue
            scaler.unscale_(opt)
            if clip_val is not None and clip_algorithm == "norm":
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip_val)))
            elif clip_val is not None:
                torch.nn.utils.clip_grad_value_(model.parameters(), clip_val)
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            stepped = precision != "amp" or scaler.get_scale() >= before
            skipped += not stepped
            if sched is not None and interval == "step" and stepped:
                sched.step()
            opt.zero_grad(set_to_none=True)
            if on_step is not None:
                on_step(stepped, steps)
            steps += 1
        if sched is not None and interval == "epoch":
            sched.step()
    return {"steps": steps, "skipped": skipped, "scale": scaler.get_scale() if precision == "amp" else None,
            "lr": opt.param_groups[0]["lr"], "norms": norms}


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module, atol: float = 0.0) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        if atol == 0.0:
            assert torch.equal(wa[key], wb[key]), f"{key} differs: max |d| = {(wa[key] - wb[key]).abs().max()}"
        else:
            torch.testing.assert_close(wa[key], wb[key], atol=atol, rtol=0)


class RecordingLogger:
    """A logger that keeps what it was given: `rows` is `[(step, {name: value}), ...]`."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: Any, step: int) -> None:
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any, metrics: Any = None) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...
