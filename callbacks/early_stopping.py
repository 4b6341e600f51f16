"""`EarlyStopping`: stop `fit` when a monitored metric has stopped improving."""

from __future__ import annotations

import enum
import logging
import math
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainer import Callback, MonitorError

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["EarlyStopping", "EarlyStoppingReason"]

log = logging.getLogger("trainer.callbacks")

_MODES = ("min", "max")
_CHECK_ON = ("validation_end", "train_epoch_end")


class EarlyStoppingReason(enum.Enum):
    """Why an `EarlyStopping` stopped the run (`stopping_reason`), with Lightning's names and values."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stops training after `patience` checks without an improvement of `monitor`.

    A check happens once per epoch: after validation (`check_on="validation_end"`) or after
    the training epoch (`check_on="train_epoch_end"`: it also sees this epoch's means of what
    `training_step` logged with `on_epoch=True` and what `on_train_epoch_end` logged). Without
    `check_on`, Lightning's rule picks: after the training epoch when validation runs at the
    end of every epoch (the default `val_check_interval` and `check_val_every_n_epoch=1`, or
    no validation loader at all), after validation otherwise. An improvement is a value better than the best so far by more than
    `min_delta`. Stopping is a request to the Trainer (`trainer.request_stop()`), so the
    current epoch finishes normally (epoch-end hooks, `last.ckpt`). The wait count and
    the best value are part of the checkpoint.

    Args:
        monitor: the metric name, as logged with `self.log` (e.g. ``"val/loss"``).
        mode: "min" when lower is better, "max" when higher is better.
        patience: how many checks without improvement to tolerate before stopping.
        min_delta: the smallest change that counts as an improvement (>= 0).
        check_on: "validation_end", "train_epoch_end", or None (default): Lightning's rule above.
        check_finite: stop at once when the monitored value is nan or inf; when False,
            a nan counts as a check without improvement.
        stopping_threshold: stop at once when the value is better than this (Lightning).
        divergence_threshold: stop at once when the value is worse than this (Lightning).
        check_on_train_epoch_end: Lightning's spelling of `check_on` (True:
            "train_epoch_end", False: "validation_end"; None keeps `check_on`).
        strict: a monitor that was never logged is an error (`trainer.MonitorError`);
            False: a warning, and no check.
        verbose: log every improvement (INFO).
        log_rank_zero_only: accepted for Lightning; the stop is always said once, from rank 0.

    When it stops the run it says so, once, from rank 0, as a warning on logger
    "trainer.callbacks" (shown without any logging set up): the epoch and the reason.

    Lightning's attribute names read the same state: `wait_count` is `wait`, `best_score` is
    `best` as a tensor (inf / -inf before the first check). After a stop, `stopping_reason`
    says why (an `EarlyStoppingReason`, `NOT_STOPPED` until then) and `stopping_reason_message`
    says it in words (None until then); both are in the checkpoint. A check is
    `_run_early_stopping_check(trainer)`, Lightning's name, so a subclass that moves the check to
    another hook works as there.

    Raises:
        ValueError: for an invalid argument (at construction), or when `monitor` was never
            logged by the time of the first check (the message lists what was logged).

    Example:
        >>> import callbacks
        >>> stopper = callbacks.EarlyStopping("val/loss", mode="min", patience=3)
        >>> stopper.state_dict()
        {'wait': 0, 'best': None, 'stopped_epoch': 0, 'stopping_reason': 0, 'stopping_reason_message': None}
    """

    monitors_metrics = True  # on_train_epoch_end: after the other callbacks, as in Lightning

    def __init__(
        self,
        monitor: str,  # Lightning's order of the arguments, so positional calls mean the same
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: Literal["min", "max"] = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
        *,
        check_on: Literal["validation_end", "train_epoch_end"] | None = None,
    ) -> None:
        if check_on_train_epoch_end is not None:
            check_on = "train_epoch_end" if check_on_train_epoch_end else "validation_end"
        for name, value in (("stopping_threshold", stopping_threshold), ("divergence_threshold", divergence_threshold)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"EarlyStopping({name}=...) expected a number or None. Received: {value!r}.")
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"EarlyStopping(monitor=...) expected a metric name such as 'val/loss'. Received: {monitor!r}.")
        if mode not in _MODES:
            raise ValueError(f"EarlyStopping(mode=...) expected 'min' or 'max'. Received: {mode!r}.")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"EarlyStopping(patience=...) expected an int >= 0. Received: {patience!r}.")
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or not min_delta >= 0:
            raise ValueError(f"EarlyStopping(min_delta=...) expected a number >= 0. Received: {min_delta!r}.")
        if check_on is not None and check_on not in _CHECK_ON:
            raise ValueError(
                f"EarlyStopping(check_on=...) expected 'validation_end' or 'train_epoch_end'. Received: {check_on!r}."
            )
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = float(min_delta)
        self._check_on_given = check_on
        self.check_on: str = check_on or "validation_end"  # until a fit says which (`_resolve_check_on`)
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.strict = strict
        self.verbose = verbose
        self.log_rank_zero_only = log_rank_zero_only
        self.wait = 0
        self.best: float | None = None
        self.stopped_epoch = 0  # the epoch it stopped after (Lightning's 0 while it has not stopped)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self._fitting = False
        self._checked = self._warned = False
        self._said_stop = False  # the stop is said once per fit (a stop held by min_epochs repeats it)

    @property
    def state_key(self) -> str:
        """Lightning's key: ``EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}`` (the class's own name)."""
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    @property
    def _legacy_state_keys(self) -> tuple[str, ...]:
        return (f"EarlyStopping[{self.monitor}]",)  # what earlier versions wrote

    @property
    def wait_count(self) -> int:
        """Lightning's name of `wait`: checks since the last improvement."""
        return self.wait

    @wait_count.setter
    def wait_count(self, value: int) -> None:
        self.wait = int(value)

    @property
    def best_score(self) -> torch.Tensor:
        """Lightning's `best_score`: the best value so far as a tensor (inf for mode="min", -inf for "max" before any)."""
        if self.best is None:
            return torch.tensor(math.inf if self.mode == "min" else -math.inf)
        return _as_logged(self.best)  # float32, or float64 for a value logged in float64

    def monitored_metrics(self, trainer: Trainer) -> dict[str, str]:
        """`monitor`, checked with every other monitor once the run's names are known (strict only;
        at validation's end only when the run validates)."""
        self._resolve_check_on(trainer)
        if not self.strict or (self.check_on == "validation_end" and sum(trainer.num_val_batches) == 0):
            return {}
        return {self.monitor: self.check_on}

    # -------------------------------------------------------------------- hooks
    def _resolve_check_on(self, trainer: Trainer) -> None:
        """Without `check_on`, Lightning's rule: after the training epoch when validation runs
        (if at all) once at the end of every epoch, after validation otherwise."""
        if self._check_on_given is None:
            interval = trainer.args.val_check_interval
            every_epoch_end = (interval is None or interval == 1.0) and trainer.args.check_val_every_n_epoch == 1
            self.check_on = "train_epoch_end" if every_epoch_end else "validation_end"

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        self._resolve_check_on(trainer)
        self._fitting = True  # validate()/test() outside fit never count as checks
        self._said_stop = False

    def on_fit_end(self, trainer: Trainer, module: Any) -> None:
        self._fitting = False

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        self._fitting = False

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        # after every on_validation_epoch_end (the module's and each callback's), as Lightning's
        if self._fitting and self.check_on == "validation_end" and not trainer.sanity_checking:
            self._run_early_stopping_check(trainer)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if not self._fitting:
            return
        if self.check_on == "train_epoch_end":
            self._run_early_stopping_check(trainer)
        elif not self._checked and not self._warned:  # validation runs before this hook
            self._warned = True
            log.warning(
                "EarlyStopping(monitor=%r) made no check in epoch %d: no validation ran. Pass a val_loader "
                "to fit, or use check_on='train_epoch_end'.", self.monitor, trainer.current_epoch,
            )
        self._checked = False

    # -------------------------------------------------------------------- logic
    def _run_early_stopping_check(self, trainer: Trainer) -> None:
        """One check of the monitored value (Lightning's name: a subclass that moves the check to
        another hook calls it from there, as Lightning's docs show)."""
        self._check(trainer)

    def _check(self, trainer: Trainer) -> None:
        self._checked = True
        if trainer.fast_dev_run:  # a smoke test of the code: no stop decided from its numbers (Lightning)
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            logged = ", ".join(sorted(metrics)) or "nothing"
            if not self.strict:
                log.warning("EarlyStopping(monitor=%r, strict=False): not logged at %s; no check. Logged: %s.",
                            self.monitor, self.check_on, logged)
                return
            raise MonitorError(
                f"{MonitorError.describe(f'EarlyStopping(monitor={self.monitor!r})', self.monitor, metrics)} "
                f"Checked at {self.check_on}. Expected a name logged with self.log. Received these metrics: {logged}."
            )
        value = float(metrics[self.monitor])
        if self.check_finite and not math.isfinite(value):
            self._stop(trainer, f"{self.monitor} = {value} is not finite", EarlyStoppingReason.NON_FINITE_METRIC)
            return
        current: torch.Tensor = _as_logged(value)
        better = (lambda a, b: bool(a < b)) if self.mode == "min" else (lambda a, b: bool(a > b))
        if self.stopping_threshold is not None and better(current, self.stopping_threshold):
            self._stop(trainer, f"Stopping threshold reached: {self.monitor} = {value:.6g}, "
                       f"stopping_threshold={self.stopping_threshold}", EarlyStoppingReason.STOPPING_THRESHOLD)
            return
        if self.divergence_threshold is not None and better(-current, -self.divergence_threshold):
            self._stop(trainer, f"Divergence threshold reached: {self.monitor} = {value:.6g}, "
                       f"divergence_threshold={self.divergence_threshold}", EarlyStoppingReason.DIVERGENCE_THRESHOLD)
            return
        if self._improved(value):
            if self.verbose:
                log.info("EarlyStopping: %s improved to %.6g.", self.monitor, value)
            self.best, self.wait = value, 0
            return
        self.wait += 1  # nan (with check_finite=False) never improves: it counts against patience
        if self.wait >= self.patience:
            best = "any value" if self.best is None else f"{self.best:.6g}"
            by = f" by more than min_delta={self.min_delta:g}" if self.min_delta else ""
            checks = "1 check" if self.wait == 1 else f"{self.wait} checks"
            self._stop(trainer, f"{self.monitor} did not improve on {best}{by} for {checks}")

    def _improved(self, value: float) -> bool:
        """Better than the best by more than `min_delta`, computed as Lightning computes it: in
        the logged value's precision (float32 for what `self.log` reduced), `value -/+ min_delta`
        against the best value."""
        if math.isnan(value):
            return False
        if self.best is None:
            return True
        logged = _as_logged(value)
        best = torch.tensor(self.best, dtype=logged.dtype)
        if self.mode == "min":
            return bool(logged + self.min_delta < best)
        return bool(logged - self.min_delta > best)

    def _stop(self, trainer: Trainer, reason: str,
              why: EarlyStoppingReason = EarlyStoppingReason.PATIENCE_EXHAUSTED) -> None:
        self.stopped_epoch = int(trainer.current_epoch)
        self.stopping_reason, self.stopping_reason_message = why, reason
        if trainer.is_global_zero and not self._said_stop:  # once, from rank 0 (every rank decides alike)
            self._said_stop = True
            # A warning, so that a script without a logging handler shows it (Lightning's is verbose-only INFO).
            log.warning("EarlyStopping: stopping after epoch %d: %s.", self.stopped_epoch, reason)
        trainer.request_stop()

    # -------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"wait": self.wait, "best": self.best, "stopped_epoch": self.stopped_epoch,
                "stopping_reason": self.stopping_reason.value, "stopping_reason_message": self.stopping_reason_message}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait = int(state["wait"])
        self.best = None if state["best"] is None else float(state["best"])
        self.stopped_epoch = int(state.get("stopped_epoch") or 0)  # older files: None before a stop
        self.stopping_reason = EarlyStoppingReason(state.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.value))
        self.stopping_reason_message = state.get("stopping_reason_message")

    def __repr__(self) -> str:
        return (
            f"EarlyStopping(monitor={self.monitor!r}, mode={self.mode!r}, patience={self.patience}, "
            f"min_delta={self.min_delta}, check_on={self.check_on!r})"
        )


def _as_logged(value: float) -> torch.Tensor:
    """A monitored value as the tensor it was logged as: float32 (what `self.log` makes of a
    number and reduces in) when it is exactly a float32, float64 otherwise. Comparisons with a
    threshold or `min_delta` then round as Lightning's tensor comparisons do (0.7 logged is
    not below `stopping_threshold=0.7`)."""
    single = torch.tensor(value, dtype=torch.float32)
    return single if float(single) == value else torch.tensor(value, dtype=torch.float64)
