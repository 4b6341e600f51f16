"""Where `Module.log` values go: kept on their device until someone reads them.

Per-step values keep only the latest tensor; epoch values keep a running reduction
(weighted sum and weight for "mean"). Nothing here reads a tensor to the host except
`to_floats`, which the Trainer calls at logging intervals, at epoch ends and when a
user reads `trainer.callback_metrics`.

Naming: a metric logged with both `on_step=True` and `on_epoch=True` keeps its name for
the per-step series and gets the suffix `_epoch` for its epoch reduction, so the two
series never share one TensorBoard tag.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["MetricStore", "to_floats", "EPOCH_SUFFIX", "batch_size_of", "fit_summary"]

_REDUCTIONS = ("mean", "sum", "max", "min")
EPOCH_SUFFIX = "_epoch"


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
    """Latest per-step values and running epoch reductions of logged metrics.

    Attributes:
        step: per-step values logged in training since the last write (device tensors).
        epoch: running epoch reductions, by the name they will be written under.
        latest: the newest value of every metric (tensors or floats), for `callback_metrics`.
        prog_bar: names to show in the progress bar.
        evaluating: True while validate/test/predict runs; per-step values logged then
            only update `latest` (they are never mixed into the training series).
    """

    def __init__(self) -> None:
        self.step: dict[str, torch.Tensor] = {}
        self.epoch: dict[str, _EpochAccumulator] = {}
        self.latest: dict[str, torch.Tensor | float] = {}
        self.prog_bar: set[str] = set()
        self.evaluating = False

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
        if not isinstance(name, str) or not name:
            raise ValueError(f"self.log(name, ...) expected a non-empty string name. Received: {name!r}.")
        if reduce not in _REDUCTIONS:
            raise ValueError(
                f"self.log({name!r}, ..., reduce=...) expected one of {', '.join(map(repr, _REDUCTIONS))}. "
                f"Received: {reduce!r}."
            )
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(
                f"self.log({name!r}, ..., batch_size=...) expected a positive int or None. Received: {batch_size!r}."
            )
        tensor = _as_tensor(name, value)
        if on_step:
            if not self.evaluating:
                self.step[name] = tensor
            self.latest[name] = tensor
        if on_epoch:
            key = name + EPOCH_SUFFIX if on_step else name
            accumulator = self.epoch.get(key)
            if accumulator is None:
                accumulator = self.epoch[key] = _EpochAccumulator(reduce)
            accumulator.add(tensor, float(batch_size) if batch_size is not None else 1.0)
        if prog_bar:
            self.prog_bar.add(name)

    def take_step_values(self) -> dict[str, torch.Tensor]:
        """The per-step values logged since the last call (device tensors)."""
        values, self.step = self.step, {}
        return values

    def close_epoch(self, across_ranks: Any = None) -> dict[str, torch.Tensor]:
        """Reduce and clear the epoch accumulators; the results also become `latest`.

        `across_ranks(values, {name: (reduce, weight)})` (the strategy's `reduce_epoch`)
        combines them over processes, so every rank keeps the same values.
        """
        values = {name: acc.compute() for name, acc in self.epoch.items() if acc.total is not None}
        if across_ranks is not None:
            values = across_ranks(values, {name: (acc.reduce, acc.weight) for name, acc in self.epoch.items()})
        self.epoch = {}
        self.latest.update(values)
        return values

    def update_latest(self, values: Mapping[str, float]) -> None:
        """Record values the Trainer already read to the host (e.g. the automatic train/ scalars)."""
        self.latest.update(values)


def to_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """Read values to Python floats with one host transfer per device (floats pass through)."""
    out: dict[str, float] = {}
    by_device: dict[torch.device, list[str]] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(name)
        else:
            out[name] = float(value)
    for names in by_device.values():
        stacked = torch.stack([values[n].detach().float().reshape(()) for n in names])  # type: ignore[union-attr]
        out.update(zip(names, stacked.tolist()))
    return {name: out[name] for name in values}


def batch_size_of(batch: Any) -> int | None:
    """Samples in a batch: dim 0 of its first tensor (depth-first), or None when it has none.

    Reads tensor metadata only (no host synchronisation).
    """
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    if isinstance(batch, (list, tuple)):
        for item in batch:
            size = batch_size_of(item)
            if size is not None:
                return size
        return None
    if isinstance(batch, Mapping):
        return batch_size_of(list(batch.values()))
    return None


def fit_summary(trainer: Any, module: Any) -> str:
    """The one-line summary the Trainer logs (INFO) when a run starts."""
    total = trainable = 0
    for parameter in module.parameters():
        total += parameter.numel()
        trainable += parameter.numel() if parameter.requires_grad else 0
    args, world = trainer.args, trainer.strategy.world_size
    batch = getattr(trainer._train_loader, "batch_size", None)
    if isinstance(batch, int) and not isinstance(batch, bool):
        k = args.accumulate_grad_batches
        effective = (
            f"effective batch size {batch * k * world} "
            f"(batch_size {batch} x accumulate_grad_batches {k} x world_size {world})"
        )
    else:
        effective = "effective batch size unknown (the loader has no batch_size)"
    return (
        f"Training {type(module).__name__}: {total:,} parameters ({trainable:,} trainable) | "
        f"precision {trainer.precision.name} | device {trainer.strategy.device} | {effective}"
    )
