"""Metric objects passed to `self.log`: a torchmetrics `Metric`, or anything shaped like one.

Lightning's semantics, which the metric store follows for them:

- per step, the value of the metric's last forward (its `_forward_cache`, read when
  `self.log` is called); a metric only `update`d since its last reset has none, and then no
  step value is recorded (Lightning skips it too);
- per epoch, `metric.compute()` once the epoch's hooks have run (the metric's own
  `compute` does any synchronisation across processes: no mean over ranks on top), then
  `metric.reset()` once the epoch is over: a training metric after the last
  `on_train_epoch_end` hook, an evaluation metric when the validation/test pass ends;
- `reduce`/`reduce_fx` and `batch_size` have no effect (the metric reduces itself).

torchmetrics is not imported here: a `torchmetrics.Metric` is recognised through
`sys.modules` (it is loaded when the user created one), and any other object with callable
`update`, `compute` and `reset` is treated the same way, so a home-made metric class works
too. An object that also has `items` is a collection (`torchmetrics.MetricCollection`): it is
logged through `self.log_dict`, never `self.log`.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import torch

__all__ = ["is_metric", "is_metric_collection", "collection_error", "MetricEntry", "step_value", "compute_entries", "reset_all"]

_METHODS = ("update", "compute", "reset")


def _torchmetrics_class(name: str) -> type | None:
    module = sys.modules.get("torchmetrics")
    cls = getattr(module, name, None) if module is not None else None
    return cls if isinstance(cls, type) else None


def _shaped_like_a_metric(value: Any) -> bool:
    if isinstance(value, (torch.Tensor, numbers.Number, str, bytes)):
        return False
    return all(callable(getattr(value, method, None)) for method in _METHODS)


def is_metric_collection(value: Any) -> bool:
    """Whether `value` is a collection of metrics (`torchmetrics.MetricCollection` or alike)."""
    cls = _torchmetrics_class("MetricCollection")
    if cls is not None and isinstance(value, cls):
        return True
    return _shaped_like_a_metric(value) and callable(getattr(value, "items", None))


def is_metric(value: Any) -> bool:
    """Whether `value` is one metric object (`torchmetrics.Metric` or alike), not a collection."""
    cls = _torchmetrics_class("Metric")
    if cls is not None and isinstance(value, cls):
        return True
    return _shaped_like_a_metric(value) and not callable(getattr(value, "items", None))


def collection_error(name: str, value: Any) -> ValueError:
    """The error for `self.log(name, collection)` (Lightning refuses it too)."""
    return ValueError(
        f"self.log({name!r}, ...) received a collection of metrics ({type(value).__name__}); self.log takes one "
        "metric. Log a collection with self.log_dict(collection): each of its metrics is then logged under "
        "its own name."
    )


def _scalar(name: str, value: Any, what: str) -> torch.Tensor:
    """`value` (what a metric returned) as a 0-dim float tensor, without a host read."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}, metric): the metric's {what} is a tensor of shape {tuple(value.shape)}; "
                "expected a scalar. Log one element (for example a metric with average='macro'), or log the "
                "values yourself under one name each."
            )
        return value.detach().reshape(())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return torch.tensor(float(value))
    raise ValueError(
        f"self.log({name!r}, metric): the metric's {what} is {value!r} of type {type(value).__name__}; "
        "expected a scalar tensor. A metric returning several values is logged with self.log_dict."
    )


def step_value(name: str, metric: Any) -> torch.Tensor | None:
    """The metric's value of its last forward (`_forward_cache`), or None when it has none."""
    cache = getattr(metric, "_forward_cache", None)
    return None if cache is None else _scalar(name, cache, "last forward value (_forward_cache)")


class MetricEntry:
    """A metric object reduced over an epoch: `compute()` at the epoch's close.

    `source` is the name it was logged under and `alias` whether the epoch value also
    becomes `callback_metrics[source]` (logged with both `on_step` and `on_epoch`), as
    for tensor reductions.
    """

    __slots__ = ("metric", "source", "alias")

    def __init__(self, metric: Any, source: str, alias: bool) -> None:
        self.metric = metric
        self.source = source
        self.alias = alias


def compute_entries(entries: dict[str, MetricEntry]) -> dict[str, torch.Tensor]:
    """`compute()` of every entry, once per metric object (a metric logged under two names
    is computed, and under DDP synchronised, once)."""
    computed: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for key, entry in entries.items():
        ident = id(entry.metric)
        if ident not in computed:
            computed[ident] = _scalar(entry.source, entry.metric.compute(), "compute() result")
        out[key] = computed[ident]
    return out


def reset_all(metrics: dict[int, Any]) -> None:
    """`reset()` every metric (each object once)."""
    for metric in metrics.values():
        metric.reset()
