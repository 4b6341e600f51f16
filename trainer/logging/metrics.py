"""Where `Module.log` values go: kept on their device until someone reads them.

Per-step values are reduced over the micro-batches of one optimizer step (the current
accumulation window, told apart by `clock`, the Trainer's `global_step`); epoch values
keep a running reduction (weighted sum and weight for "mean"). Training and evaluation
keep separate epoch reductions, so neither leaks into the other. Nothing here reads a
tensor to the host except `to_floats`, which the Trainer calls at logging intervals, at
epoch ends and when a user reads `trainer.callback_metrics`.

Naming (Lightning's): a metric logged with both `on_step=True` and `on_epoch=True` is
written as `<name>_step` per step and `<name>_epoch` per epoch, and `callback_metrics[name]`
is the latest of the two: the step value during the epoch, the epoch value once it closed
(so `ModelCheckpoint(monitor=name)` at epoch end ranks by the epoch value). A name the
user logs is the user's: when it is one the Trainer writes per step itself (`train/loss`,
`train/lr-group0`, throughput, ...), the Trainer stops writing its own value under it
(`leave_to_user`, noted once), so a monitor of that name always watches the user's value.

Epoch means are weighted by each value's batch size: `batch_size=` when given, else the
size of the batch being processed (dim 0 of its first tensor, as Lightning infers it), so
batches of 2, 2 and 1 with values 1, 1 and 0 average to 0.8.

A metric object (a torchmetrics `Metric`) logged instead of a value follows Lightning's
rules (trainer/logging/metric_objects.py): its last forward per step, `compute()` at the
epoch's close, `reset()` once the epoch is over (`end_train_epoch`, and the end of an
evaluation pass).

The reductions themselves and their read to the host: `reduction.py`; `trainer.callback_metrics`:
`callback_view.py`; `MonitorError`: `monitor_error.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainer.logging.callback_view import CallbackView
from trainer.logging.metric_objects import (
    MetricEntry,
    check_same_on_every_rank,
    collection_error,
    compute_entries,
    is_metric,
    is_metric_collection,
    reset_all,
    step_value,
)
from trainer.logging.monitor_error import MonitorError
from trainer.logging.reduction import _REDUCTIONS, _as_tensor, _Reduction, batch_size_of, to_floats

__all__ = ["MonitorError", "MetricStore", "to_floats", "EPOCH_SUFFIX", "STEP_SUFFIX", "AUTOMATIC", "batch_size_of"]

log = logging.getLogger("trainer")
EPOCH_SUFFIX = "_epoch"
STEP_SUFFIX = "_step"
# Written by the Trainer at every logging step (plus `train/lr-groupN`, `train/lr-optK-groupN`).
AUTOMATIC = (
    "train/loss", "train/grad_norm", "train/loss_scale", "train/skipped_steps",
    "train/steps_per_sec", "train/samples_per_sec",
)


class MetricStore(CallbackView):
    """Per-step and epoch reductions of logged metrics, and the latest value of each.

    Attributes:
        step: per-step reductions logged in training since the last write.
        epoch: running epoch reductions of training, by the name they are written under.
        latest: the newest value of every metric (tensors, floats, or a per-step reduction
            still open), for `callback_metrics` (read with `to_floats`).
        prog_bar: names to show in the progress bar.
        clock: returns the current optimizer step; per-step values logged while it does
            not change (the micro-batches of one accumulation window) are reduced together.
    """

    def __init__(self) -> None:
        self.step: dict[str, _Reduction] = {}
        self._seen_steps: dict[str, _Reduction] = {}  # the `step` reductions already put in logged_metrics
        self.epoch: dict[str, _Reduction | MetricEntry] = {}
        self._eval_epoch: dict[str, _Reduction | MetricEntry] = {}
        # Metric objects logged in training / evaluation, reset when such an epoch is over
        # (by object id; kept, as Lightning keeps every metric it was given).
        self._train_objects: dict[int, Any] = {}
        self._eval_objects: dict[int, Any] = {}
        self.latest: dict[str, torch.Tensor | float | _Reduction] = {}
        self.eval_step_values: dict[str, torch.Tensor] = {}  # an evaluation's per-step values (progress bar only)
        self.prog_bar: set[str] = set()
        self.clock: Callable[[], int] | None = None
        self.hidden: set[str] = set()  # logged with logger=False: callback_metrics only
        self.claimed: set[str] = set()  # every name the user logs: the Trainer writes no scalar of its own under them
        self._noted: set[str] = set()  # names the Trainer said it leaves to the user
        self.batch: Any = None  # the batch being processed: its size weights epoch means
        # Which of several evaluation loaders runs (None: one loader, or outside their batches):
        # names logged meanwhile get Lightning's "/dataloader_idx_N" suffix.
        self.dataloader_idx: int | None = None
        self.loader_name: str | None = None  # the loader's name, when the step asked for names
        self._eval_owner: dict[str, int | None] = {}  # evaluation epoch name -> the loader it was logged for
        self._loader_suffix = ""  # the suffix of the value being logged
        self._evaluating = False
        self.epoch_end_reached = False  # the module's epoch-end hook runs: `current` shows the open epoch
        # trainer.callback_metrics: one dict, refreshed in place on every read (as Lightning's), and
        # what the last refresh put in it, to tell values a callback set there since
        self.view: dict[str, Any] = {}
        self._view_given: dict[str, Any] = {}

    @property
    def evaluating(self) -> bool:
        """True while validate/test/predict runs: per-step values then only update `latest`,
        and epoch values go to the evaluation's own reductions (cleared when a pass starts)."""
        return self._evaluating

    @evaluating.setter
    def evaluating(self, value: bool) -> None:
        if value:
            self._eval_epoch = {}  # nothing left over from an earlier (perhaps failed) pass
            self._eval_owner = {}
        elif self._evaluating:  # a pass ended (after its on_validation_end/on_test_end hooks)
            reset_all(self._eval_objects)
        self._evaluating = value

    def end_train_epoch(self) -> None:
        """A training epoch is over (its `on_train_epoch_end` hooks ran and its values were
        written): reset the metric objects logged in training, as Lightning does."""
        reset_all(self._train_objects)

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
        add_dataloader_idx: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"self.log(name, ...) expected a non-empty string name. Received: {name!r}.")
        self._loader_suffix = ""
        if self._evaluating:
            base, name = name, self._eval_name(name, add_dataloader_idx)
            if base in self.hidden:  # logger=False holds for the loader's name too
                self.hidden.add(name)
        if reduce not in _REDUCTIONS:
            raise ValueError(
                f"self.log({name!r}, ..., reduce=...) expected one of {', '.join(map(repr, _REDUCTIONS))}. "
                f"Received: {reduce!r}."
            )
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(
                f"self.log({name!r}, ..., batch_size=...) expected a positive int or None. Received: {batch_size!r}."
            )
        if not on_step and not on_epoch:
            raise ValueError(
                f"self.log({name!r}, ..., on_step=False, on_epoch=False) would record nothing. Expected "
                "on_step=True (per step), on_epoch=True (reduced over the epoch) or both."
            )
        if is_metric_collection(value):
            raise collection_error(name, value)
        if name not in self.claimed:
            self._claim(name)
        if is_metric(value):
            self._log_metric_object(name, value, on_step=on_step, on_epoch=on_epoch, prog_bar=prog_bar)
            return
        tensor = _as_tensor(name, value)
        if batch_size is None and on_epoch and reduce == "mean" and self.batch is not None:
            batch_size = batch_size_of(self.batch)  # tensor metadata only: no host read
        weight = float(batch_size) if batch_size is not None else 1.0
        if on_step:
            step_key = self._forked(name, STEP_SUFFIX) if on_epoch else name
            if self._evaluating:  # the progress bar shows it; callback_metrics does not (Lightning's rule)
                kept = tensor.clone()  # kept past this step (see _Reduction.add)
                self.eval_step_values[name] = self.eval_step_values[step_key] = kept
            else:
                window = self.clock() if self.clock is not None else None
                current = self.step.get(step_key)
                if current is None or current.window != window or current.reduce != reduce:
                    current = self.step[step_key] = _Reduction(reduce, name, window)
                current.add(tensor, 1.0)
                self.latest[name] = current  # reduced when read; `name` before `name_step`, as Lightning orders them
                self.latest[step_key] = current
        key = name
        if on_epoch:
            key, reductions = self._epoch_slot(name, on_step)
            slot = reductions.get(key)
            if slot is None:
                slot = reductions[key] = _Reduction(reduce, name, alias=on_step)
            elif isinstance(slot, MetricEntry) or slot.source != name or slot.reduce != reduce:
                what = "the metric object" if isinstance(slot, MetricEntry) else f"..., reduce={slot.reduce!r}"
                raise ValueError(
                    f"self.log({name!r}, ..., reduce={reduce!r}): its epoch value is written as {key!r}, which "
                    f"this epoch already reduces for self.log({slot.source!r}, {what}). "
                    "Expected one name and one reduce per epoch metric: rename one of them."
                )
            slot.add(tensor, weight)
        if prog_bar:
            self._show(name, on_step, on_epoch, key)

    def _eval_name(self, name: str, add_dataloader_idx: bool) -> str:
        """The name a value logged during an evaluation is kept under: with several loaders,
        `name/dataloader_idx_N` (Lightning's), unless `add_dataloader_idx=False`; one name
        logged for two loaders without the suffix is Lightning's error."""
        index = self.dataloader_idx
        if add_dataloader_idx and index is not None:
            self._loader_suffix = f"/dataloader_idx_{index}" if self.loader_name is None else f"/{self.loader_name}"
            name += self._loader_suffix
        owner = self._eval_owner.setdefault(name, index)
        if owner is not None and index is not None and owner != index:
            raise ValueError(
                f"self.log({name!r}, ..., add_dataloader_idx=False) was called for dataloader {index} after "
                f"dataloader {owner}: one name cannot hold two loaders' values. Expected a name per loader: "
                f"drop add_dataloader_idx=False (the name gets '/dataloader_idx_N'), or put the index in the name."
            )
        return name

    def _forked(self, name: str, tail: str) -> str:
        """`name_step` / `name_epoch`; with a loader's suffix, Lightning's `base_epoch/dataloader_idx_N`."""
        suffix = self._loader_suffix
        if suffix and name.endswith(suffix):
            return name[: -len(suffix)] + tail + suffix
        return name + tail

    def eval_owners(self, gather: Callable[[Any], list[Any]] | None = None) -> dict[str, int | None]:
        """The current evaluation's epoch names (as `close_epoch` returns them) and the loader each
        was logged for (None: outside the loaders' batches, e.g. in `on_validation_epoch_end`).
        `gather` (the strategy's `all_gather_object`) adds the names other ranks logged: a rank
        that had no batch of a loader still files that loader's values under it."""
        owners: dict[str, int | None] = {}
        for key, slot in self._eval_epoch.items():
            owners[key] = self._eval_owner.get(slot.source)
        if gather is not None:
            for per_rank in gather(owners):
                for key, owner in per_rank.items():
                    if owners.get(key) is None:
                        owners[key] = owner
        return owners

    def _claim(self, name: str) -> None:
        """The user logs `name` for the first time: from now on the Trainer writes no scalar of its
        own under it (`leave_to_user`), and a value of its own already recorded there goes."""
        self.claimed.add(name)
        if isinstance(self.latest.get(name), float):  # the Trainer's own value (the user's are tensors)
            self.latest.pop(name, None)

    def leave_to_user(self, own: list[str]) -> set[str]:
        """Which of the Trainer's own scalar names `own` the user logs (each noted once): the
        Trainer writes no value of its own under those."""
        taken = {name for name in own if name in self.claimed}
        for name in sorted(taken - self._noted):
            self._noted.add(name)
            log.info(
                "self.log(%r, ...): the Trainer writes a value of its own under this name too; the name is yours, "
                "so the Trainer no longer writes its own (callback_metrics, loggers and monitors see yours).", name,
            )
        return taken

    def _epoch_slot(self, name: str, on_step: bool) -> tuple[str, dict[str, _Reduction | MetricEntry]]:
        """The name an epoch value is written under, and the current epoch's reductions."""
        key = self._forked(name, EPOCH_SUFFIX) if on_step else name
        return key, self._eval_epoch if self._evaluating else self.epoch

    def _show(self, name: str, on_step: bool, on_epoch: bool, epoch_key: str) -> None:
        """Show a metric in the progress bar by the names it is written under: `name`, or
        `name_step` and `name_epoch`."""
        self.prog_bar.add(name)
        if on_step:
            self.prog_bar.add(self._forked(name, STEP_SUFFIX) if on_epoch else name)
        if on_epoch:
            self.prog_bar.add(epoch_key)

    def _log_metric_object(self, name: str, metric: Any, *, on_step: bool, on_epoch: bool, prog_bar: bool) -> None:
        """`self.log(name, metric)` with a metric object (metric_objects.py): per step its last
        forward's value, per epoch its `compute()`; `reduce` and `batch_size` do not apply."""
        training = not self._evaluating
        (self._train_objects if training else self._eval_objects)[id(metric)] = metric
        if on_step:
            value = step_value(name, metric)  # None: only update() ran since its last reset
            step_key = self._forked(name, STEP_SUFFIX) if on_epoch else name
            if value is not None and training:
                last = self.step[step_key] = _Reduction("mean", name, self.clock() if self.clock is not None else None)
                last.add(value, 1.0)  # the step's last value, copied on the device
                self.latest[name] = self.latest[step_key] = last
            elif value is not None:
                self.eval_step_values[name] = self.eval_step_values[step_key] = value.clone()
        key = name
        if on_epoch:
            key, reductions = self._epoch_slot(name, on_step)
            current = reductions.get(key)
            if current is not None and (current.source != name or isinstance(current, _Reduction)):
                raise ValueError(
                    f"self.log({name!r}, metric): its epoch value is written as {key!r}, which this epoch already "
                    f"reduces for self.log({current.source!r}, ...). Expected one value per epoch metric: rename "
                    "one of them."
                )
            reductions[key] = MetricEntry(metric, name, alias=on_step)  # the latest object logged under it
        if prog_bar:
            self._show(name, on_step, on_epoch, key)

    def pending_step_values(self) -> dict[str, torch.Tensor]:
        """The per-step values logged since the last write and not yet in `trainer.logged_metrics`
        (device tensors; `mark_pending_seen` records them there), minus those logged with
        `logger=False`: each name's newest step."""
        return {name: reduction.compute() for name, reduction in self.step.items()
                if reduction.source not in self.hidden and self._seen_steps.get(name) is not reduction}

    def mark_pending_seen(self) -> None:
        """The pending step values went into `logged_metrics` (a later write there, such as a
        validation's value of the same name, must not be overwritten by them again)."""
        self._seen_steps = dict(self.step)

    def take_step_values(self) -> dict[str, torch.Tensor]:
        """The per-step values logged since the last call (device tensors), minus those
        logged with `logger=False`."""
        values = {name: reduction.compute() for name, reduction in self.step.items() if reduction.source not in self.hidden}
        self.step, self._seen_steps = {}, {}
        return values

    def close_loader(self, gather: Callable[[Any], list[Any]]) -> None:
        """One of several evaluation loaders ended: each metric object logged so far whose value
        is not taken yet is computed now (Lightning's order), after every rank agreed on which
        (`gather`: the strategy's `all_gather_object`; a mismatch is an error on every rank)."""
        self._compute_objects(self._eval_epoch, gather)

    @staticmethod
    def _compute_objects(reductions: Mapping[str, Any], gather: Callable[[Any], list[Any]] | None) -> dict[str, torch.Tensor]:
        entries = {name: e for name, e in reductions.items() if isinstance(e, MetricEntry)}
        if gather is not None:  # one small exchange per loader or pass, never per step
            pending = sorted(name for name, e in entries.items() if e.value is None)
            check_same_on_every_rank(pending, gather(pending))
        return compute_entries(entries)

    def close_epoch(self, across_ranks: Any = None, gather: Callable[[Any], list[Any]] | None = None) -> dict[str, torch.Tensor]:
        """Reduce and clear the current epoch's reductions (training's, or the evaluation's
        while `evaluating`); the results also become `latest`.

        `across_ranks(values, {name: (reduce, weight)})` (the strategy's `reduce_epoch`)
        combines them over processes, so every rank keeps the same values. `gather` (the
        strategy's `all_gather_object`, given by evaluations, whose loaders may give a rank
        no batch) first checks that every rank has the same metric objects to compute.
        """
        reductions = self._eval_epoch if self._evaluating else self.epoch
        tensors = {name: r for name, r in reductions.items() if isinstance(r, _Reduction)}
        values = {name: r.compute() for name, r in tensors.items() if r.total is not None}
        if across_ranks is not None:
            values = across_ranks(values, {name: (r.reduce, r.weight) for name, r in tensors.items()})
        # A metric object's compute() synchronises it across ranks itself: no reduction on top.
        computed = self._compute_objects(reductions, gather)
        merged = {name: computed[name] if name in computed else values[name]
                  for name in reductions if name in computed or name in values}  # in the order first logged
        merged.update((name, value) for name, value in values.items() if name not in merged)  # logged on other ranks
        values = merged
        if self._evaluating:
            self._eval_epoch = {}
        for key, value in values.items():  # callback_metrics[name]: the epoch value once the epoch closed,
            slot = reductions.get(key)  # in Lightning's order: `name`, then `name_epoch`
            if slot is not None and slot.alias:
                self.latest[slot.source] = value
            self.latest[key] = value
        if not self._evaluating:
            self.epoch = {}
        return values
