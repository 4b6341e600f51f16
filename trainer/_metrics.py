"""Where `Module.log` values go: kept on their device until someone reads them.

Per-step values keep only the latest tensor; epoch values keep a running reduction
(weighted sum and weight for "mean"). Nothing here reads a tensor to the host except
`to_floats`, which the Trainer calls at logging intervals, at epoch ends and when a
user reads `trainer.callback_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["MetricStore", "to_floats"]

_REDUCTIONS = ("mean", "sum", "max", "min")


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}, ...) expected a scalar (one-element) tensor or a number. "
                f"Received: a tensor of shape {tuple(value.shape)}. Log a reduction such as .mean()."
            )
        return value.detach().reshape(())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value))
    raise ValueError(
        f"self.log({name!r}, ...) expected a scalar tensor, int or float. "
        f"Received: {value!r} of type {type(value).__name__}."
    )


class _EpochAccumulator:
    __slots__ = ("reduce", "total", "weight")

    def __init__(self, reduce: str) -> None:
        self.reduce = reduce
        self.total: torch.Tensor | None = None
        self.weight = 0.0

    def add(self, value: torch.Tensor, weight: float) -> None:
        value = value.float()
        if self.total is None:
            self.total = value * weight if self.reduce == "mean" else value.clone()
        elif self.reduce == "mean":
            self.total = self.total + value * weight
        elif self.reduce == "sum":
            self.total = self.total + value
        elif self.reduce == "max":
            self.total = torch.maximum(self.total, value)
        else:
            self.total = torch.minimum(self.total, value)
        self.weight += weight

    def compute(self) -> torch.Tensor:
        assert self.total is not None
        return self.total / self.weight if self.reduce == "mean" else self.total


class MetricStore:
    """Latest per-step values and running epoch reductions of logged metrics."""

    def __init__(self) -> None:
        self.step: dict[str, torch.Tensor] = {}
        self.epoch: dict[str, _EpochAccumulator] = {}
        self.latest: dict[str, torch.Tensor | float] = {}
        self.prog_bar: set[str] = set()

    def log(
        self,
        name: str,
        value: Any,
        *,
        on_step: bool,
        on_epoch: bool,
        prog_bar: bool,
        reduce: str,
        batch_size: int | None,
    ) -> None:
        if reduce not in _REDUCTIONS:
            raise ValueError(
                f"self.log({name!r}, ..., reduce=...) expected one of {', '.join(map(repr, _REDUCTIONS))}. "
                f"Received: {reduce!r}."
            )
        tensor = _as_tensor(name, value)
        if on_step:
            self.step[name] = tensor
            self.latest[name] = tensor
        if on_epoch:
            accumulator = self.epoch.get(name)
            if accumulator is None:
                accumulator = self.epoch[name] = _EpochAccumulator(reduce)
            accumulator.add(tensor, float(batch_size) if batch_size is not None else 1.0)
        if prog_bar:
            self.prog_bar.add(name)

    def take_step_values(self) -> dict[str, torch.Tensor]:
        """The per-step values logged since the last call (device tensors)."""
        values, self.step = self.step, {}
        return values

    def close_epoch(self) -> dict[str, torch.Tensor]:
        """Reduce and clear the epoch accumulators; the results also become `latest`."""
        values = {name: acc.compute() for name, acc in self.epoch.items() if acc.total is not None}
        self.epoch = {}
        self.latest.update(values)
        return values


def to_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Read device tensors to Python floats with a single host transfer."""
    names = list(values)
    tensors = [values[n] for n in names]
    if not tensors:
        return {}
    if all(isinstance(t, torch.Tensor) for t in tensors):
        stacked = torch.stack([t.detach().float().to(tensors[0].device) for t in tensors])  # type: ignore[union-attr]
        return dict(zip(names, stacked.tolist()))
    return {n: float(v) for n, v in zip(names, tensors)}


