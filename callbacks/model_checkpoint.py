"""`ModelCheckpoint`: keep the best (or latest) checkpoints of a run, when and as Lightning's does.

Files are written with `trainer.save_checkpoint`, which is atomic; a file that falls out
of the top k is deleted only after the new one is safely on disk. The callback's
bookkeeping (the kept files, their scores, the best one) is part of every checkpoint, so
a run resumed with `fit(..., ckpt_path=...)` keeps ranking against the same files.

When a save happens is Lightning's rule: `every_n_train_steps` in `on_train_batch_end` (after
the step, once the callbacks before this one ran), epoch saves in `on_train_epoch_end` or,
when the run validates more or less often than once an epoch (`save_on_train_epoch_end`
resolved to False), in `on_validation_end`, the mid-epoch validations included; never twice
at one `global_step`. A save decided at an epoch's end is written at the next clean cut of
the loop (the next epoch's start or the end of training), where the epoch is complete in
the saved loop state, so every file resumes exactly.

`dirpath` may be a URL (`s3://bucket/run/checkpoints`, with the Trainer's `storage_options`): the
files are objects there, each appearing whole, and `save_last="link"` writes a copy (an object
store has no links). The checkpoint the run resumed from is never deleted, even when it leaves
the top k; nor is any file outside `dirpath` (another run's).

The top-k bookkeeping and its state: `_kept_files.py`; file names and the argument check:
`_checkpoint_names.py`; where the fit is when a save is decided: `_checkpoint_moments.py`.
"""

from __future__ import annotations

import logging
import datetime
import math
import os
import time
from typing import TYPE_CHECKING, Any, Literal

from callbacks._checkpoint_moments import _last_batch, _mid_epoch, _validates, _validation_follows
from callbacks._checkpoint_names import _BUILTIN, _DEFAULT_NAME, _PLACEHOLDER, _render, _validate
from callbacks._kept_files import KeptFiles
from trainer import MonitorError
from trainer.callback import Checkpoint
from trainer.checkpoint import is_remote, location
from trainer.logging.reduction import MetricValue

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["ModelCheckpoint"]

log = logging.getLogger("trainer")


class ModelCheckpoint(KeptFiles, Checkpoint):
    """Save checkpoints during `fit`, keeping the `save_top_k` best by `monitor`.

    Args:
        dirpath: folder of the files (or a URL, `s3://...`); default `trainer.log_dir / "checkpoints"`
            (`trainer.checkpoint_dir / "checkpoints"`: in the bucket when root_dir is a URL).
        filename: name without extension; `{epoch}`, `{step}` and any logged metric,
            with an optional format spec (`"{epoch}-{val_loss:.2f}"` writes
            `epoch=0-val_loss=5.00.ckpt`, Lightning's names; a metric not logged yet is
            written as 0, as Lightning does, with a warning). A `/` in the result (as in
            metric names) becomes `_`, so no subfolder appears. `.ckpt` is appended.
        monitor: metric to rank files by (a key of `trainer.callback_metrics`); None
            keeps the latest.
        mode: "min" or "max": which direction of `monitor` is better.
        save_top_k: how many files to keep; -1 keeps all, 0 none. Without `monitor`
            only 1 (the latest), 0 or -1 are meaningful.
        save_last: also keep `last.ckpt` in `dirpath` (`"link"`: as a symlink to the newest
            file this callback wrote, Lightning's): after every step-triggered save, after
            every epoch save that wrote a file, and at the end of training if nothing was saved.
        every_n_train_steps: save after every n optimizer steps (None or 0: never by steps).
        every_n_epochs: save after every n epochs (0: never by epochs). None: 1 when
            neither `every_n_train_steps` nor `train_time_interval` is given, else 0
            (Lightning's defaults).
        train_time_interval: a `datetime.timedelta`: save at the first optimizer step after
            this much training time since the last such save (or since training started),
            as Lightning's; rank 0's clock decides for every rank.
        save_on_exception: when fit fails, save `filename` (rendered with the metrics of that
            moment) and, with `save_last`, `last.ckpt`, as Lightning's; a failure inside an
            accumulation window saves the last completed step (see `OnExceptionCheckpoint`).
        auto_insert_metric_name: write `{name}` as `name=value` (Lightning's default).
        save_weights_only: files hold only the module's weights (load them with
            `module.load_state_dict(torch.load(path, weights_only=True)["module"])`, or
            `trainer.validate/test(..., ckpt_path=path)`); they can't resume a run.
        verbose: log every save.
        save_on_train_epoch_end: save epoch files at the training epoch's end (True) or at
            the end of each validation (False, mid-epoch validations included). None
            (Lightning's rule): at the epoch's end when the run validates once every epoch
            or never, else at the validations.
        enable_version_counter: a file name that already exists (from an earlier run, or a
            constant `filename`) gets `-v1`, `-v2`, ... (Lightning's); False overwrites it.

    Without `monitor`, `best_model_path` is the latest file and `best_model_score` stays None
    (Lightning's).

    Example:
        >>> import callbacks
        >>> best = callbacks.ModelCheckpoint(monitor="val/loss", mode="min", save_top_k=2,
        ...                                  filename="{epoch}-{val/loss:.3f}")
        >>> best.best_model_path, best.kth_best_model_path
        ('', '')
    """

    CHECKPOINT_NAME_LAST = "last"

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,  # Lightning's order of the arguments
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | Literal["link"] | None = False,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: Literal["min", "max"] = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: datetime.timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
            every_n_epochs = 1  # Lightning's default trigger
        _validate(_DEFAULT_NAME if filename is None else filename, monitor, mode, save_top_k, save_last,
                  every_n_train_steps, every_n_epochs)
        if train_time_interval is not None and not isinstance(train_time_interval, datetime.timedelta):
            raise ValueError("ModelCheckpoint(train_time_interval=...) expected a datetime.timedelta (e.g. "
                             f"timedelta(minutes=30)) or None. Received: {train_time_interval!r}.")
        self.train_time_interval, self.save_on_exception = train_time_interval, bool(save_on_exception)
        self._last_time_checked: float | None = None
        self.auto_insert_metric_name, self.save_weights_only, self.verbose = auto_insert_metric_name, save_weights_only, verbose
        self.save_on_train_epoch_end, self.enable_version_counter = save_on_train_epoch_end, enable_version_counter
        self._dir: Any = location(dirpath) if dirpath is not None else None
        self.filename, self.monitor, self.mode = filename, monitor, mode
        self.save_top_k, self.save_last = save_top_k, save_last  # as given (Lightning's): None and False alike
        self.every_n_train_steps = every_n_train_steps or None  # None: never by steps
        self.every_n_epochs = every_n_epochs or None  # None: never by epochs
        self.best_k_models: dict[str, float] = {}  # path -> score (with a monitor)
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.kth_best_model_path = ""
        self.kth_value = math.inf if mode == "min" else -math.inf
        self.current_score: float | None = None
        self.last_model_path = ""
        self._last_saved_step = 0  # Lightning's: nothing is saved before the first step, nor twice at one step
        self._pending: dict[str, Any] | None = None  # an epoch-end save waiting for a clean cut
        self._written = ""  # the last file this fit wrote (Lightning's `_last_checkpoint_saved`)
        # The global step at the last on_train_batch_end: a batch end after a step is a clean cut.
        # (Read from the counter, not from on_train_step_end: overriding that hook makes amp with a
        # fused optimizer read the GradScaler's verdict at every step, which this callback never uses.)
        self._step_seen: int | None = None
        self._deferred = False  # a step save waits for the validation that logs `monitor`
        self._fitting = False
        self._validated = False  # a validation ran in this fit (then a missing monitor is an error)
        self._warned: set[str] = set()

    @property
    def dirpath(self) -> str | None:
        """The checkpoints' folder as a string, as Lightning's (None until `fit` resolves the default)."""
        return None if self._dir is None else str(self._dir)

    @dirpath.setter
    def dirpath(self, value: str | os.PathLike[str] | None) -> None:
        self._dir = None if value is None else location(value)

    @property
    def state_key(self) -> str:
        """Lightning's key: ``ModelCheckpoint{'monitor': ..., 'mode': ..., 'every_n_train_steps': 0,
        'every_n_epochs': 1, 'train_time_interval': None}`` (the class's own name)."""
        return self._generate_state_key(
            monitor=self.monitor, mode=self.mode, every_n_train_steps=self.every_n_train_steps or 0,
            every_n_epochs=self.every_n_epochs or 0, train_time_interval=self.train_time_interval)

    @property
    def _legacy_state_keys(self) -> tuple[str, ...]:
        return (f"ModelCheckpoint{{monitor={self.monitor!r}, mode={self.mode!r}, "  # what earlier versions wrote
                f"every_n_train_steps={self.every_n_train_steps}, every_n_epochs={self.every_n_epochs}}}",)

    # -------------------------------------------------------------------------- hooks
    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        self._fitting, self._validated, self._written, self._deferred = True, False, "", False
        if self._dir is None:  # rank 0's run folder (other ranks must not create one)
            strategy = trainer.strategy
            log_dir = str(trainer.checkpoint_dir) if strategy.is_global_zero else None
            self._dir = location(strategy.broadcast_object(log_dir), trainer.args.storage_options) / "checkpoints"
        elif is_remote(self._dir):
            self._dir = location(str(self._dir), trainer.args.storage_options)
        trainer.check_checkpoint_path(self._dir)  # a URL: its bucket and credentials, before any step

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        self._last_time_checked = time.monotonic()  # Lightning's: the interval counts from here
        self._step_seen = trainer.global_step

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        stepped = self._step_seen is not None and trainer.global_step != self._step_seen
        self._step_seen = trainer.global_step
        n = self.every_n_train_steps
        if not stepped or not (n is not None and trainer.global_step % n == 0 or self._time_is_due(trainer)):
            return
        if self.monitor is not None and (
            self.monitor not in _candidates(trainer)  # a validation metric not logged yet
            or (not self._saves_on_train_epoch_end(trainer) and _last_batch(trainer) and _validation_follows(trainer))
        ):
            self._deferred = True  # Lightning's: saved at the next on_validation_end, with fresh metrics
            return
        if not self._skip(trainer):
            self._save_now(trainer, self._plan(trainer, last="always"))

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        if not self._fitting or trainer.sanity_checking:
            return
        self._validated = True
        if self._skip(trainer) or self._saves_on_train_epoch_end(trainer):
            return
        if self._deferred:
            self._deferred = False
            plan = self._plan(trainer, last="always")
        elif self._epoch_due(trainer):
            plan = self._plan(trainer, last="if_saved")
        else:
            return
        if _mid_epoch(trainer):
            self._save_now(trainer, plan)
        else:  # the epoch's own validation: its end is not counted yet, so write at the next cut
            self._pending = plan

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self._fitting and not self._skip(trainer) and self._saves_on_train_epoch_end(trainer) and self._epoch_due(trainer):
            self._pending = self._plan(trainer, last="if_saved")

    def _at_epoch_cut(self, trainer: Trainer) -> None:
        """The Trainer calls it once an epoch is counted done (after its schedulers stepped and
        last.ckpt was written), before the next epoch's `on_train_epoch_start` hooks: the
        epoch-end file holds the state those hooks have not changed yet, as Lightning's does."""
        self._flush(trainer)

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        self._flush(trainer)

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        self._flush(trainer)
        if self.save_last and not self._written and not trainer.fast_dev_run:  # Lightning: a last.ckpt in any case
            self._save_now(trainer, {"name": None, "score": None, "step": trainer.global_step, "last": True})

    def on_fit_end(self, trainer: Trainer, module: Any) -> None:
        self._flush(trainer)
        self._fitting = False

    def _trainers_last(self, trainer: Trainer) -> str:
        """The Trainer's own `last.ckpt` when `dirpath` is the run folder it writes it in: the
        same file as this callback's `last.ckpt` (one file, as in Lightning), not a name taken
        by another run. "" otherwise (a weights-only `last.ckpt` keeps its own name: the
        Trainer's file must resume the whole run)."""
        if self.save_weights_only or not trainer.args.enable_checkpointing or self._dir is None:
            return ""
        own = location(str(trainer.checkpoint_dir), trainer.args.storage_options)
        return str(own / f"{self.CHECKPOINT_NAME_LAST}.ckpt") if str(own) == str(self._dir) else ""

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        fitting, self._fitting = self._fitting, False
        if not (self.save_on_exception and fitting and self._dir is not None) or self._skip(trainer):
            return
        metrics = dict(trainer.callback_metrics)
        values = {m.group(1): 0 for m in _PLACEHOLDER.finditer(self._pattern)} | metrics
        values["epoch"], values["step"] = trainer.current_epoch, trainer.global_step
        path = str(self._dir / f"{_render(self._pattern, values, self.auto_insert_metric_name)}.ckpt")
        try:  # Lightning's: the file is not ranked among the top k
            trainer.save_checkpoint(path, weights_only=self.save_weights_only)
            if self.save_last:
                self.last_model_path = str(self._dir / f"{self.CHECKPOINT_NAME_LAST}.ckpt")
                trainer.save_checkpoint(self.last_model_path, weights_only=self.save_weights_only)
        except Exception as error:  # noqa: BLE001 - the run's own error is the one to raise
            log.warning("ModelCheckpoint(save_on_exception=True) could not write %s: %s", path, error)
            return
        log.info("%s was raised (%s); saved checkpoint to %s", type(exception).__name__, exception, path)

    def monitored_metrics(self, trainer: Trainer) -> dict[str, str]:
        """`monitor`, checked with every other monitor once the run's names are known: only
        when the run validates (before a validation a missing monitor is a warning, Lightning's rule)."""
        if self.monitor is None or self.monitor in _BUILTIN or self.save_top_k == 0 or not _validates(trainer):
            return {}
        return {self.monitor: "train_epoch_end" if self._saves_on_train_epoch_end(trainer) else "validation_end"}

    # ---------------------------------------------------------------------- decisions
    @property
    def _pattern(self) -> str:
        """The file name pattern (`filename`, Lightning's `{epoch}-{step}` when None)."""
        return _DEFAULT_NAME if self.filename is None else self.filename

    def _time_is_due(self, trainer: Trainer) -> bool:
        """`train_time_interval` has passed since the last time it was (rank 0's clock)."""
        interval, since = self.train_time_interval, self._last_time_checked
        if interval is None:
            return False
        now = time.monotonic()
        due = bool(trainer.strategy.broadcast_object(since is not None and now - since >= interval.total_seconds()))
        if due:
            self._last_time_checked = now
        return due

    def _skip(self, trainer: Trainer) -> bool:
        return bool(trainer.fast_dev_run) or trainer.sanity_checking or self._last_saved_step == trainer.global_step

    def _epoch_due(self, trainer: Trainer) -> bool:
        n = self.every_n_epochs
        return n is not None and (trainer.current_epoch + 1) % n == 0

    def _saves_on_train_epoch_end(self, trainer: Trainer) -> bool:
        """Lightning's rule for `save_on_train_epoch_end=None`: at the training epoch's end
        unless the run validates other than once at every epoch's end."""
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if trainer.args.check_val_every_n_epoch != 1:
            return False
        return not _validates(trainer) or trainer.args.val_check_interval in (None, 1.0)

    def _plan(self, trainer: Trainer, last: Literal["always", "if_saved"]) -> dict[str, Any]:
        """What to write now (rank 0 decides, every rank follows: a save is a collective and
        under DDP per-step metrics are each rank's own); marks this step as saved."""
        strategy = trainer.strategy
        local = self._decide(trainer) if strategy.is_global_zero else None
        plan: dict[str, Any] = strategy.broadcast_object(local)
        if plan.get("error"):
            raise MonitorError(plan["error"])
        plan["last"] = bool(self.save_last) and (last == "always" or plan["name"] is not None)
        if plan["name"] is not None or plan["last"]:
            self._last_saved_step = trainer.global_step
        return plan

    def _decide(self, trainer: Trainer) -> dict[str, Any]:
        """The top-k file of a save now (`name` None: none), from the metrics of this moment."""
        metrics = _candidates(trainer)
        plan: dict[str, Any] = {"name": None, "score": None, "step": trainer.global_step}
        if self.save_top_k == 0:
            return plan
        if self.monitor is not None and self.monitor not in metrics:
            message = (
                f"{MonitorError.describe(f'ModelCheckpoint(monitor={self.monitor!r})', self.monitor, metrics)} "
                f"trainer.callback_metrics holds: {sorted(metrics) or 'no metrics'}. Log it with "
                f"self.log({self.monitor!r}, value), or fix monitor."
            )
            if self._validated:  # Lightning's rule: an error once a validation has run
                return {**plan, "error": message}
            self._warn(message + " No file is saved until it is logged.")
            return plan
        missing = sorted({n for n in (m.group(1) for m in _PLACEHOLDER.finditer(self._pattern)) if n not in metrics and n not in _BUILTIN})
        if missing:
            self._warn(f"ModelCheckpoint(filename={self.filename!r}): {', '.join(map(repr, missing))} not in "
                       f"trainer.callback_metrics ({sorted(metrics)}); written as 0, as Lightning does.")
        values = {name: 0 for name in missing} | metrics
        values["epoch"] = int(metrics["epoch"]) if "epoch" in metrics else trainer.current_epoch
        values["step"] = int(metrics["step"]) if "step" in metrics else trainer.global_step
        name = _render(self._pattern, values, self.auto_insert_metric_name)
        if self.monitor is None:
            return {**plan, "name": self._versioned(name, self.best_model_path)}
        score = float(metrics[self.monitor])
        if not self._admits(score):
            return plan
        if math.isnan(score):  # Lightning's: a NaN is kept as the worst possible score
            score = math.inf if self.mode == "min" else -math.inf
        return {**plan, "name": self._versioned(name, self._replaced()), "score": MetricValue(score)}

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    def _flush(self, trainer: Trainer) -> None:
        if self._pending is not None:
            plan, self._pending = self._pending, None
            self._save_now(trainer, plan)

    # -------------------------------------------------------------------------- saving
    def _tell_loggers(self, trainer: Trainer) -> None:
        """Lightning's `logger.after_save_checkpoint(checkpoint_callback)` after each file written, from rank 0
        (a logger that uploads checkpoints reads `best_model_path`, `last_model_path`, `best_k_models` here)."""
        if trainer.strategy.is_global_zero:
            for logger in trainer.loggers:
                hook = getattr(logger, "after_save_checkpoint", None)
                if callable(hook):
                    hook(self)

    def _save_now(self, trainer: Trainer, plan: dict[str, Any]) -> None:
        """Write a plan's files, then delete what they replace (only once they are on disk)."""
        assert self._dir is not None
        before = self.state_dict()
        stale: list[str] = []
        self._last_saved_step = plan["step"]
        try:
            if plan["name"] is not None:
                path = str(self._dir / f"{plan['name']}.ckpt")
                stale += self._record(path, plan["score"])
                trainer.save_checkpoint(path, weights_only=self.save_weights_only)
                self._written = path
                self._tell_loggers(trainer)
                if self.verbose:
                    log.info("ModelCheckpoint: saved %s (%s=%s).", path, self.monitor or "step", plan["score"])
            if plan.get("last", self.save_last):
                previous = self.last_model_path
                mine = previous or self._trainers_last(trainer)
                self.last_model_path = str(self._dir / f"{self._versioned(self.CHECKPOINT_NAME_LAST, mine)}.ckpt")
                newest = self._written if self._written != self.last_model_path else ""
                if self.save_last == "link" and newest and self.save_top_k != 0 and not is_remote(self._dir):
                    _link(trainer, newest, self.last_model_path)  # Lightning's: a symlink to the newest file
                else:
                    trainer.save_checkpoint(self.last_model_path, weights_only=self.save_weights_only)
                    self._written = self.last_model_path
                    self._tell_loggers(trainer)
                stale.append(previous)
        except BaseException:
            self.load_state_dict(before)  # the bookkeeping never names a file that isn't there
            raise
        if not trainer.strategy.is_global_zero:  # only rank 0 touches files
            return
        kept = {*self.best_k_models, self.best_model_path, self.last_model_path}
        for path in stale:
            if path and path not in kept and self._dir in location(path).parents:
                trainer.remove_checkpoint(path)


def _link(trainer: Trainer, target: str, link: str) -> None:
    """`link` becomes a relative symlink to `target` (rank 0; replaced atomically)."""
    if trainer.strategy.is_global_zero:
        temporary = f"{link}.link.tmp"
        if os.path.lexists(temporary):
            os.remove(temporary)
        os.symlink(os.path.relpath(target, os.path.dirname(link)), temporary)
        os.replace(temporary, link)
    trainer.strategy.barrier()


def _candidates(trainer: Trainer) -> dict[str, Any]:
    """What a monitor or a file name may read: `trainer.callback_metrics`, with `epoch` and
    `step` (the current epoch and global step unless logged), as Lightning's monitor candidates."""
    metrics: dict[str, Any] = dict(trainer.callback_metrics)
    metrics.setdefault("epoch", trainer.current_epoch)
    metrics.setdefault("step", trainer.global_step)
    return metrics
