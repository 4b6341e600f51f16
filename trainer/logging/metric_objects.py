"""Metric objects passed to `self.log`: a torchmetrics `Metric`, or anything shaped like one.

Lightning's semantics, which the metric store follows for them:

- per step, the value of the metric's last forward (its `_forward_cache`, read when
  `self.log` is called); a metric only `update`d since its last reset has none, and then no
  step value is recorded (Lightning skips it too);
- per epoch, `metric.compute()` once the epoch's hooks have run (the metric's own
  `compute` does any synchronisation across processes: no mean over ranks on top), then
  `metric.reset()` once the epoch is over: a training metric after the last
  `on_train_epoch_end` hook, an evaluation metric when the validation/test pass ends;
  with several evaluation loaders, what was logged while a loader ran is computed when that
  loader ends, without a reset in between (Lightning's order), so one metric object logged
  for loaders 0 and 1 gives loader 0 its value over loader 0's batches and loader 1 its value
  over both loaders' batches;
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

__all__ = [
    "is_metric", "is_metric_collection", "collection_error", "MetricEntry", "step_value", "compute_entries",
    "check_same_on_every_rank", "reset_all",
]

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

    __slots__ = ("metric", "source", "alias", "value")

    def __init__(self, metric: Any, source: str, alias: bool) -> None:
        self.metric = metric
        self.source = source
        self.alias = alias
        self.value: torch.Tensor | None = None  # its compute(), once taken (at the end of its loader)


def compute_entries(entries: dict[str, MetricEntry]) -> dict[str, torch.Tensor]:
    """`compute()` of every entry, once per metric object (a metric logged under two names
    is computed, and under DDP synchronised, once), in the order of the names: the same
    order on every rank, so their synchronisations pair up. An entry whose value was already
    taken (`value`) keeps it."""
    computed: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for key in sorted(entries):
        entry = entries[key]
        if entry.value is None:
            ident = id(entry.metric)
            if ident not in computed:
                computed[ident] = _scalar(entry.source, entry.metric.compute(), "compute() result")
            entry.value = computed[ident]
        out[key] = entry.value
    return {key: out[key] for key in entries}


def check_same_on_every_rank(names: list[str], gathered: list[list[str]]) -> None:
    """Every rank must compute the same metric objects (`names`: this rank's; `gathered`: each
    rank's), since each `compute()` synchronises all ranks: a rank that has one to compute
    while another has none would wait forever. Raised on every rank alike (all see `gathered`)."""
    every = sorted(set().union(*map(set, gathered)))
    for name in every:
        having = [rank for rank, per_rank in enumerate(gathered) if name in per_rank]
        if len(having) < len(gathered):
            lacking = [rank for rank in range(len(gathered)) if rank not in having]
            raise RuntimeError(
                f"self.log({name!r}, metric) logged a metric object on rank(s) {having} but not on rank(s) "
                f"{lacking}, which had no batch where it is logged (a loader whose share on those ranks is "
                "empty). A metric object's compute() synchronises every rank, so each rank must have logged "
                "it, or the run would wait forever. Expected every rank to get at least one batch of each "
                "loader: let the Trainer add a DistributedSampler (it pads the shares), give each rank a share "
                "of every loader, or log a tensor value instead (it is reduced over the ranks that logged it)."
            )


def reset_all(metrics: dict[int, Any]) -> None:
    """`reset()` every metric (each object once)."""
    for metric in metrics.values():
        metric.reset()
