"""`trainer.callback_metrics` as `MetricStore` serves it: one dict refreshed in place on every read
(as Lightning's), with a value a callback set in it recorded so it can be monitored, the open
epoch's values shown while the module's epoch-end hook runs, and a new dict for each run.

`CallbackView` is a base of `MetricStore`, which sets the attributes it reads in its `__init__`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch

from trainer.logging.metric_objects import MetricEntry
from trainer.logging.reduction import _Reduction, metric_values

__all__ = ["CallbackView"]

_UNSET = object()


class CallbackView:
    """`MetricStore`'s latest values as `trainer.callback_metrics` shows them."""

    latest: dict[str, torch.Tensor | float | _Reduction]
    epoch: dict[str, _Reduction | MetricEntry]
    _eval_epoch: dict[str, _Reduction | MetricEntry]
    _evaluating: bool
    epoch_end_reached: bool
    view: dict[str, Any]
    _view_given: dict[str, Any]
    eval_step_values: dict[str, torch.Tensor]
    prog_bar: set[str]

    def current(self) -> dict[str, torch.Tensor | float | _Reduction]:
        """`latest`, and while the module's epoch-end hook runs (`epoch_end_reached`) this rank's
        open epoch values too, as Lightning's `callback_metrics` shows them there: what
        `validation_step` logged, and what the hook itself just logged."""
        if not self.epoch_end_reached:
            return self.latest
        reductions = self._eval_epoch if self._evaluating else self.epoch
        open_values = {key: r for key, r in reductions.items() if isinstance(r, _Reduction) and r.total is not None}
        aliases = {r.source: r for r in open_values.values() if r.alias}
        return {**self.latest, **open_values, **aliases}

    def bar_values(self) -> dict[str, torch.Tensor | float | _Reduction]:
        """`current`, with the per-step values an evaluation logged (the progress bar shows them;
        `callback_metrics` never does, as in Lightning): the newest wins a shared name."""
        if self._evaluating:
            return {**self.current(), **self.eval_step_values}
        return {**self.eval_step_values, **self.current()}

    def callback_view(self) -> dict[str, Any]:
        """`trainer.callback_metrics`: the values as floats (`MetricValue`s), in one dict updated in place, as
        Lightning's. A number or tensor a callback set in it since the last read
        (`trainer.callback_metrics["name"] = value`) is recorded first, so it can be monitored."""
        for name, value in self.view.items():
            if self._view_given.get(name, _UNSET) is not value and isinstance(value, (torch.Tensor, numbers.Real)):
                self.latest[name] = value.detach() if isinstance(value, torch.Tensor) else float(value)
        fresh = metric_values(self.current())
        self.view.clear()  # what a read holds mirrors what was logged (the sanity check's values go)
        self.view.update(fresh)
        self._view_given = fresh
        return self.view

    def clear_latest(self) -> None:
        """Forget every metric: `validate`/`test` start a new, empty `callback_metrics` dict, as
        Lightning's (a reference to the earlier one keeps the earlier values); which names are
        `prog_bar=True` is this run's to say (`progress_bar_metrics` starts empty)."""
        self.latest = {}
        self.prog_bar = set()
        self.eval_step_values = {}
        self.view = {}
        self._view_given = {}

    def renew_view(self) -> None:
        """A run ends: `callback_metrics` becomes a new dict with the same values, as Lightning's
        (a reference held during the run keeps the final values, and is no longer refreshed)."""
        try:
            self.callback_view()  # the final values, in the dict a reference may hold
        except Exception:  # noqa: BLE001 - a run that failed on the device: keep what the last read gave
            pass
        self.view = dict(self.view)

    def update_latest(self, values: Mapping[str, float]) -> None:
        """Record values the Trainer already read to the host (e.g. the automatic train/ scalars)."""
        self.latest.update(values)
