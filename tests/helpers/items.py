"""A padded "sequence" model whose loss is summed over a varying number of valid positions,
and the hand-written loop that divides by the window's item count before each backward.

Shared by tests/loops/test_item_weighted.py and tests/helpers/scripts/items_worker.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from tests.helpers.reference import DTYPES
from trainer import Module

T = 8  # positions per sequence


class ItemNet(Module):
    """A per-position MLP with dropout; `training_step` sums the squared error over the valid
    positions (mask) and returns it with their count. `mean_rule=True` returns the
    per-micro-batch mean instead (today's rule: each micro-batch weighs the same)."""

    def __init__(self, lr: float = 0.05, dropout: float = 0.1, mean_rule: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
        )
        self.lr = lr
        self.mean_rule = mean_rule

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def summed_loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, mask = batch
        error = (self(x).float() - y).pow(2).squeeze(-1)
        return (error * mask).sum(), mask.sum()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        summed, count = self.summed_loss(batch)
        if self.mean_rule:
            return summed / count
        return {"loss": summed, "num_items": count}

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def make_token_data(n: int = 33, seed: int = 0) -> TensorDataset:
    """`n` sequences of T positions; sequence i has between 1 and T valid positions."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, T, 6, generator=g)
    y = (x[..., :1] * 2 - x[..., 1:2]) + 0.1 * torch.randn(n, T, 1, generator=g)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return TensorDataset(x, y, mask)


def make_item_model(seed: int = 0, **kwargs: Any) -> ItemNet:
    torch.manual_seed(seed)
    return ItemNet(**kwargs)


class Batches(IterableDataset):
    """The same batches with no len(): the Trainer fetches a window before its first forward."""

    def __init__(self, data: TensorDataset, batch_size: int) -> None:
        self.data, self.batch_size = data, batch_size

    def __iter__(self) -> Iterator[Any]:
        for i in range(0, len(self.data), self.batch_size):
            yield tuple(t[i:i + self.batch_size] for t in self.data.tensors)


def iterable_loader(data: TensorDataset, batch_size: int = 3) -> DataLoader:
    return DataLoader(Batches(data, batch_size), batch_size=None)


def reference_item_fit(
    model: ItemNet,
    loader: Iterable[Any],
    *,
    precision: str = "fp32",
    epochs: int = 1,
    accumulate: int = 1,
    scaler_kwargs: dict[str, Any] | None = None,
    sum_over_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None,
    before_epoch: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The hand-written loop: per window, count the valid items (summed over ranks), then
    forward_i and backward(summed_loss_i / total) in order; unscale, step, update, zero_grad.
    Returns the per-item loss of every window (sum of summed losses / total)."""
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp", **(scaler_kwargs or {}))
    dtype = DTYPES[precision]
    losses: list[float] = []
    steps = 0
    model.train()
    for epoch in range(epochs):
        if before_epoch is not None:
            before_epoch(epoch)
        batches = iter(loader)
        batch_idx = 0
        while True:
            window = [batch for _, batch in zip(range(accumulate), batches)]
            if not window:
                break
            total = window[0][2].sum()
            for batch in window[1:]:
                total = total + batch[2].sum()
            if sum_over_ranks is not None:
                total = sum_over_ranks(total)
            loss_sum = None
            for batch in window:
                autocast = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
                with autocast:
                    summed, _ = model.summed_loss(batch)
                scaler.scale(summed / total).backward()
                loss_sum = summed.detach() if loss_sum is None else loss_sum + summed.detach()
                batch_idx += 1
            assert loss_sum is not None
            losses.append(float(loss_sum / total))
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            steps += 1
            if len(window) < accumulate:
                break
    return {"losses": losses, "steps": steps, "scale": scaler.get_scale() if precision == "amp" else None}
