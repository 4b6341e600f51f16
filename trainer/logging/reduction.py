"""Running reductions of logged values, kept on their device, and their one read to the host.

`_Reduction` is what `MetricStore` keeps per metric (a weighted "mean", "sum", "max" or "min");
`to_floats` reads many of them with one transfer per device; `batch_size_of` is the batch size
that weights an epoch mean, read from tensor metadata only.

Example:
    >>> import torch
    >>> to_floats({"loss": torch.tensor(0.5), "lr": 0.1})
    {'loss': 0.5, 'lr': 0.1}
    >>> batch_size_of({"x": torch.zeros(4, 3), "y": torch.zeros(4)})
    4
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["to_floats", "batch_size_of", "MetricValue"]

_REDUCTIONS = ("mean", "sum", "max", "min")


class MetricValue(float):
    """A metric's value as the Trainer reports it (`trainer.callback_metrics`, `logged_metrics`,
    `ModelCheckpoint.best_model_score`): a Python float that also answers the calls code written
    for Lightning's scalar tensors makes on it (`.item()`, `.cpu()`, `.detach()`, `.tolist()`,
    `.numpy()`), so `trainer.callback_metrics["val_loss"].item()` (Optuna's and Ray Tune's
    Lightning callbacks) works unchanged. A checkpoint stores it as a plain float.

    Example:
        >>> value = MetricValue(0.25)
        >>> value.item(), value.cpu().detach().item(), value + 1, f"{value:.1f}"
        (0.25, 0.25, 1.25, '0.2')
    """

    __slots__ = ()

    def item(self) -> float:
        return float(self)

    def tolist(self) -> float:
        return float(self)

    def cpu(self) -> MetricValue:
        return self

    def detach(self) -> MetricValue:
        return self

    def numpy(self) -> Any:
        import numpy

        return numpy.float64(self)


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}, ...) expected a scalar (one-element) tensor or a number. "
                f"Received: a tensor of shape {tuple(value.shape)}. Log a reduction such as .mean()."
            )
        return value.detach().reshape(())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):  # int, float, NumPy scalars
        return torch.tensor(float(value))
    raise ValueError(
        f"self.log({name!r}, ...) expected a scalar tensor, int or float. "
        f"Received: {value!r} of type {type(value).__name__}."
    )


class _Reduction:
    """A running "mean" (weighted), "sum", "max" or "min" of device tensors.

    `source` is the name the metric was logged under and `window` the optimizer step it
    belongs to (per-step reductions only).
    """

    __slots__ = ("reduce", "total", "weight", "source", "window", "alias")

    def __init__(self, reduce: str, source: str, window: int | None = None, alias: bool = False) -> None:
        self.reduce = reduce
        self.source = source
        self.window = window
        self.alias = alias  # the epoch value also becomes callback_metrics[source]
        self.total: torch.Tensor | None = None
        self.weight = 0.0

    def add(self, value: torch.Tensor, weight: float) -> None:
        converted = value if value.dtype == torch.float64 else value.float()  # float64 keeps its precision (Lightning)
        if self.total is None:
            if self.reduce == "mean" and weight != 1.0:
                self.total = converted * weight
            else:  # a copy of the first value: the logged tensor may change in place later, or be
                # a compiled graph's output whose memory the next replay reuses (CUDA graphs)
                self.total = converted.clone() if converted is value else converted
        elif self.reduce == "mean":
            self.total = self.total + (converted * weight if weight != 1.0 else converted)
        elif self.reduce == "sum":
            self.total = self.total + converted
        elif self.reduce == "max":
            self.total = torch.maximum(self.total, converted)
        else:
            self.total = torch.minimum(self.total, converted)
        self.weight += weight

    def compute(self) -> torch.Tensor:
        assert self.total is not None
        if self.reduce == "mean" and self.weight != 1.0:
            return self.total / self.weight
        return self.total


def to_floats(values: Mapping[str, torch.Tensor | float | _Reduction]) -> dict[str, float]:
    """Read values to Python floats with one host transfer per device (floats pass through)."""
    out: dict[str, float] = {}
    by_device: dict[torch.device, list[str]] = {}
    read: dict[str, torch.Tensor | float] = {
        name: v.compute() if isinstance(v, _Reduction) else v for name, v in values.items()
    }
    for name, value in read.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(name)
        else:
            out[name] = float(value)
    for names in by_device.values():
        tensors = [read[n].detach().reshape(()) for n in names]  # type: ignore[union-attr]
        # float32, or float64 when one of them is: a float64 value keeps its precision, as Lightning's does
        wide = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
        stacked = torch.stack([t.to(wide) for t in tensors])
        out.update(zip(names, stacked.tolist()))
    return {name: out[name] for name in read}


def metric_values(values: Mapping[str, torch.Tensor | float | _Reduction]) -> dict[str, MetricValue]:
    """`to_floats`, each value a `MetricValue` (what a user reads from the Trainer)."""
    return {name: MetricValue(value) for name, value in to_floats(values).items()}


def batch_size_of(batch: Any) -> int | None:
    """Samples in a batch, by Lightning's rule: the first tensor met depth-first gives its
    dim 0 (1 for a 0-dim tensor), looking into mappings (their values), dataclasses (their
    fields) and any other iterable but a string (a graph library's batch object yields its
    `(name, tensor)` pairs); None when there is no tensor.

    Reads tensor metadata only (no host synchronisation).
    """
    try:
        return _first_size(batch)
    except RecursionError:  # an object whose items are objects like it, without end
        return None


def _first_size(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, (str, bytes)) or hasattr(batch, "__array__"):  # text; NumPy arrays hold no tensor
        return None
    if isinstance(batch, Mapping):
        items: Any = batch.values()
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = (getattr(batch, field.name) for field in dataclasses.fields(batch))
    elif isinstance(batch, Iterable):
        items = batch
    else:
        return None
    for item in items:
        size = _first_size(item)
        if size is not None:
            return size
    return None
