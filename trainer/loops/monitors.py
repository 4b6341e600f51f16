"""Every monitored metric checked at once, as soon as the run's metric names are known.

EarlyStopping, ModelCheckpoint and a ReduceLROnPlateau read a metric by name (`monitor`). A
name that is never logged would otherwise be found only where each of them first reads it,
at the end of the first epoch, one at a time. `fit` knows a run's names earlier: validation's
from the sanity check (or the first validation), training's after the first training batch.
Then every monitor is checked together, and all the missing ones are reported in one
`MonitorError`, each with the nearest logged name.

A monitor first read at the training epoch's end (`check_on="train_epoch_end"`, a checkpoint
saved there, an epoch-interval scheduler) may name a metric logged in an `on_train_epoch_end`
hook, or one a validation-end hook logs or sets in `trainer.callback_metrics`: when the module
or a callback other than the monitoring ones defines one of those hooks, such a monitor is left
to its own check, which names the nearest logged name too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trainer.logging.metrics import AUTOMATIC, MonitorError

if TYPE_CHECKING:
    from trainer.loops.context import RunContext

__all__ = ["MonitorCheck"]

_EARLY = "checked once the validation names and the first training batch's were known"


class MonitorCheck:
    """Collects the names a fit logs until the check is due, then checks once; afterwards,
    when one monitor's own check fails, `combined` reports every monitor missing by then."""

    def __init__(self, validates: bool) -> None:
        self.validation_known = not validates  # no validation loader: nothing more to wait for
        self.trained = False
        self.done = False
        self.seen: set[str] = set()  # names logged before they were restored away (the sanity check's)
        self.due = {"step"}  # the points a monitor is read at that the fit has reached (a step: from the first)

    def after_validation(self, names: Iterable[str], context: RunContext) -> None:
        """After the sanity check or a validation inside fit, with the names it logged."""
        self.seen.update(names)
        self.validation_known = True
        self._check_if_due(context)

    def after_training_batch(self, context: RunContext) -> None:
        self.trained = True
        self._check_if_due(context)

    def _check_if_due(self, context: RunContext) -> None:
        if self.done or not (self.trained and self.validation_known):
            return
        self.done = True
        error = _error(context, known_names(context) | self.seen, _later_logging(context), None, _EARLY)
        if error is not None:
            raise error

    def combined(self, context: RunContext, error: MonitorError) -> MonitorError:
        """`error` (one monitor's own check failed) as the list of every monitor missing now, among
        those read by this point of the fit; `error` itself when it is not about one of them."""
        if getattr(error, "all_monitors", False):
            return error
        if not self.done and self.trained:  # the first validation, without a sanity check before it
            self.done = True
            found = _error(context, known_names(context), _later_logging(context), None, _EARLY)
        else:
            found = _error(context, known_names(context), False, self.due, "checked when the first of them was read")
        if found is None or not any(repr(name) in str(error) for name in getattr(found, "names", [])):
            return error
        return found


def _later_logging(context: RunContext) -> bool:
    """Whether code that is not a monitor runs at the training epoch's end or at a validation's
    end (it may log there, or set `trainer.callback_metrics[name]`, before the epoch's end)."""
    dispatch = context.hooks
    monitoring = {id(cb) for cb in context.hooks.callbacks if _monitored(cb, context)}
    hooks = ("on_train_epoch_end", "on_validation_epoch_end", "on_validation_end")
    return any(dispatch.module_defines(hook) for hook in hooks) or any(
        id(cb) not in monitoring for hook in hooks for cb in dispatch.overriding(hook))


def _monitors(context: RunContext) -> list[tuple[str, str, str]]:
    """(who, name, when) for every strict monitor of this fit."""
    found = []
    for callback in context.hooks.callbacks:
        for name, when in _monitored(callback, context).items():
            found.append((f"{type(callback).__name__}(monitor={name!r})", name, when))
    for config in context.optimizers.schedulers if context.optimizers is not None else []:
        if config.monitor is not None and config.strict:
            when = "train_epoch_end" if config.interval == "epoch" else "step"
            found.append((f"The LR scheduler {type(config.scheduler).__name__} ('monitor': {config.monitor!r})",
                          config.monitor, when))
    return found


def known_names(context: RunContext) -> set[str]:
    """Every name the run has logged so far or writes by itself, in each spelling a monitor may use."""
    metrics = context.metrics
    names = set(metrics.current()) | set(metrics.step) | set(metrics.epoch) | set(AUTOMATIC)
    names |= {reduction.source for reduction in (*metrics.step.values(), *metrics.epoch.values())}
    for k, optimizer in enumerate(context.optimizers.optimizers if context.optimizers is not None else []):
        names |= {f"train/lr-{f'opt{k}-' if k else ''}group{i}" for i in range(len(optimizer.param_groups))}
    return names


def _error(context: RunContext, known: set[str], later: bool, due: set[str] | None, when_checked: str) -> MonitorError | None:
    """One MonitorError naming every monitor (read by a point in `due`; None: any) whose metric
    is not in `known`; a monitor read at the epoch's end waits when code may still log there."""
    missing = [(who, name) for who, name, when in _monitors(context)
               if name not in known and (due is None or when in due) and not (later and when == "train_epoch_end")]
    if not missing:
        return None
    logged = sorted(n for n in known if n not in AUTOMATIC and not n.startswith("train/lr-"))
    lines = "\n".join(f"  - {MonitorError.describe(who, name, known)}" for who, name in missing)
    error = MonitorError(
        f"{len(missing)} monitored metric{'s are' if len(missing) > 1 else ' is'} not logged ({when_checked}):\n"
        f"{lines}\nLogged so far: {', '.join(logged) or 'nothing'}. Expected each monitor to name a metric logged "
        "with self.log (in training_step, validation_step or an epoch-end hook): fix the monitor's name, or log the metric."
    )
    error.all_monitors = True  # type: ignore[attr-defined]
    error.names = [name for _, name in missing]  # type: ignore[attr-defined]
    return error


def _monitored(callback: Any, context: RunContext) -> dict[str, str]:
    """A callback's `monitored_metrics(trainer)` (trainer.Callback's; none for other objects)."""
    declared = getattr(callback, "monitored_metrics", None)
    return declared(context.trainer) if callable(declared) else {}
