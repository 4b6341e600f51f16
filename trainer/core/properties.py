"""The Trainer's read-only state as properties (Lightning's names), kept apart from the loop."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer._utils import length_of
from trainer.core.connector import AcceleratorConnector
from trainer.core.default_checkpoint import DefaultCheckpoint
from trainer.core.fit_loop_view import FitLoopView
from trainer.logging.metrics import to_floats
from trainer.logging.reduction import MetricValue
from trainer.loops.combined import CombinedLoader
from trainer.loops.loaders import public_loaders
from trainer.loops.schedule import batch_limit
from trainer.states import RunningStage, TrainerFn, TrainerState, TrainerStatus

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.loops.fit import FitLoop
    from trainer.loops.hooks import CallbackBase
    from trainer.loops.context import RunContext
    from trainer.precision import Precision
    from trainer.strategies import Strategy

__all__ = ["TrainerProperties"]


class _Recorded:
    """What the last `test`/`predict` ran on: its loader, or `[its batch count]` ([] before it ran)."""

    def __init__(self, what: str, stage: str) -> None:
        self.what, self.stage = what, stage

    def __get__(self, trainer: TrainerProperties | None, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        if self.what == "loader":
            return public_loaders((trainer._eval_loaders or {}).get(self.stage))
        return trainer._eval_counts(self.stage)


class TrainerProperties:
    """Mixed into `Trainer`: what user code and callbacks read (never the loop's internals)."""

    args: TrainerArgs
    callbacks: list[CallbackBase]
    _run: RunContext
    _loop: FitLoop | None
    _fit_loaders: Callable[[], tuple[Any, Any]] | None
    _eval: Any
    # What the Trainer records for these properties (class defaults until it sets them):
    # the evaluation loaders and batch counts by stage, whether a run raised, the checkpoint read.
    _eval_loaders: dict[str, Any] | None = None
    _eval_batches: dict[str, list[int | float]] | None = None
    _interrupted: bool = False
    _running: str | None = None  # "fit", "validate", "test", "predict" while that call runs
    _last_call: str | None = None  # the call that runs or ran last (trainer.state.fn)
    _ckpt_path: str | None = None
    _state_view: TrainerState | None = None  # `trainer.state`, made once per run state
    _ckpt_path_set: Any = None  # `trainer.ckpt_path = path`: read by later calls given no ckpt_path

    @property
    def state(self) -> TrainerState:
        """Lightning's `status`, `fn` and `stage` (trainer/states.py), and where the loop is:
        epoch, global step, batches of the epoch (the run's `LoopState`, checkpointed as is)."""
        view, loop = self._state_view, self._run.state
        if view is None or view.loop is not loop:  # read per batch by callbacks: built once per run state
            view = self._state_view = TrainerState(loop, self._state_fn, self._state_stage, self._state_status)
        return view

    def _state_fn(self) -> TrainerFn | None:
        return None if self._last_call is None else TrainerFn(self._last_call)

    def _state_stage(self) -> RunningStage | None:
        for stage, now in ((RunningStage.SANITY_CHECKING, self.sanity_checking), (RunningStage.VALIDATING, self.validating),
                           (RunningStage.TESTING, self.testing), (RunningStage.PREDICTING, self.predicting),
                           (RunningStage.TRAINING, self.training)):
            if now:
                return stage
        return None

    def _state_status(self) -> TrainerStatus:
        if self._running is not None:
            return TrainerStatus.RUNNING
        if self._last_call is None:
            return TrainerStatus.INITIALIZING
        return TrainerStatus.INTERRUPTED if self._interrupted else TrainerStatus.FINISHED

    @property
    def strategy(self) -> Strategy:
        """Where the run happens and how its processes cooperate."""
        return self._run.strategy

    @strategy.setter
    def strategy(self, strategy: Strategy) -> None:
        self._run.strategy = strategy

    @property
    def _accelerator_connector(self) -> AcceleratorConnector:
        """Lightning's private connector, as far as callbacks written for Lightning read it
        (`is_distributed`); any other attribute raises, naming the public one to read."""
        return AcceleratorConnector(self._run.strategy)

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (completed accumulation windows), skipped steps included."""
        return self._run.state.global_step

    @property
    def current_epoch(self) -> int:
        state = self._run.state
        return state.epoch if state.shown_epoch is None else state.shown_epoch

    @property
    def precision(self) -> Precision:
        """The precision strategy object (AMP's has `.scaler`)."""
        return self._run.precision

    @property
    def callback_metrics(self) -> dict[str, Any]:
        """The latest value of every logged metric, as Python floats (read on access, into one
        dict updated in place, as Lightning's); a value a callback sets in it
        (`trainer.callback_metrics["name"] = value`) is recorded, as in Lightning."""
        return self._run.metrics.callback_view()

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The first (in automatic optimization, the only) optimizer."""
        return self._run.optimizers.optimizer if self._run.optimizers is not None else None

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Every optimizer, in the order `configure_optimizers` returned them."""
        return list(self._run.optimizers.optimizers) if self._run.optimizers is not None else []

    @property
    def lr_scheduler(self) -> Any:
        """The first LR scheduler, or None."""
        return self._run.optimizers.schedulers[0].scheduler if self._run.optimizers is not None and self._run.optimizers.schedulers else None

    @property
    def lr_scheduler_configs(self) -> list[Any]:
        """Every scheduler with when it steps (`.scheduler`, `.interval`, `.frequency`, `.monitor`)."""
        return list(self._run.optimizers.schedulers) if self._run.optimizers is not None else []

    @property
    def logger(self) -> Any:
        """The run's logger, None without one; with `logger=[...]` the first of them (Lightning's rule)."""
        loggers = self._run.output.loggers
        return loggers[0] if loggers else None

    @property
    def loggers(self) -> list[Any]:
        """Every logger of the run (`logger=[...]`); [] without one, and on ranks other than 0."""
        return self._run.output.loggers

    @property
    def history(self) -> list[dict[str, float]]:
        """One row per finished epoch of `fit`: epoch, step and that epoch's epoch-level metrics.

        Example: ``pandas.DataFrame(trainer.history).plot(x="epoch", y="val/loss")``.
        """
        return [dict(row) for row in self._run.output.history]

    @property
    def log_dir(self) -> Path:
        """This run's folder under `root_dir` (created when first needed)."""
        return self._run.output.run_dir

    @property
    def should_stop(self) -> bool:
        """Whether a stop was requested; `trainer.should_stop = True` requests one (Lightning)."""
        return bool(self._run.state.stop_requested)

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        if value:
            self.request_stop()

    @property
    def sanity_checking(self) -> bool:
        """True while the sanity validation before training runs (callbacks ignore it)."""
        return self._run.sanity_checking

    @property
    def fast_dev_run(self) -> int:
        """Batches per stage of a `fast_dev_run` (0 when off); nothing is written."""
        return int(self.args.fast_dev_run)

    def request_stop(self) -> None:  # pragma: no cover - defined by Trainer
        raise NotImplementedError

    # -------------------------------------------------------------- Lightning's names
    @property
    def max_epochs(self) -> int | None:
        return self.args.max_epochs  # type: ignore[no-any-return]

    @property
    def max_steps(self) -> int | None:
        return self.args.max_steps  # type: ignore[no-any-return]

    @property
    def fit_loop(self) -> FitLoopView:
        """Lightning's `trainer.fit_loop`, as far as projects read and set it (`max_epochs`, the
        epoch and step counters); see `trainer/core/fit_loop_view.py`."""
        return FitLoopView(self)

    @property
    def logged_metrics(self) -> dict[str, float]:
        """What was last written to the logger, updated with the newest per-step value of every
        metric logged since (as Lightning's, which takes each step's values whether or not the
        step writes them): floats (`MetricValue`s), read from the device on access."""
        pending = to_floats(self._run.metrics.pending_step_values())
        return {name: MetricValue(value) for name, value in {**self._run.output.logged, **pending}.items()}

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """What the progress bar shows (floats), with the newest value of every `prog_bar=True`
        metric: refreshed at every step, as Lightning's (read on access, like `callback_metrics`)."""
        current, shown = self._run.metrics.bar_values(), self._run.metrics.prog_bar
        live = {name: current[name] for name in shown  # a metric written as name_step/name_epoch shows under those
                if name in current and f"{name}_step" not in shown and f"{name}_epoch" not in shown}
        return {**self._run.output.shown, **to_floats(live)}

    @property
    def num_training_batches(self) -> int | float:
        """Training batches per epoch (after `limit_train_batches`); inf when unknown. Known in
        every hook of `fit` (in `configure_optimizers` too), as in Lightning."""
        batches = getattr(self._loop, "epoch_batches", None)
        loader = self._fit_loaders()[0] if self._fit_loaders is not None else self._run.train_loader
        if (batches is None or self._fit_loaders is not None) and loader is not None:
            batches = batch_limit(self.args.limit_train_batches, length_of(loader), "limit_train_batches")
        return math.inf if batches is None else batches

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps this fit will take: from max_steps, or epochs x steps per epoch."""
        per_epoch = self.num_training_batches
        if not math.isinf(per_epoch):
            per_epoch = math.ceil(per_epoch / self.args.accumulate_grad_batches) if self._manual_free() else per_epoch
        args = self.args
        epochs = args.max_epochs if args.max_epochs is not None else (None if args.max_steps else max(1, args.min_epochs or 0))
        if args.max_epochs is None and not args.max_steps and args.min_steps and not math.isinf(per_epoch) and per_epoch:
            epochs = max(epochs or 1, math.ceil(args.min_steps / per_epoch))  # no limit given: min_steps' epochs
        total = math.inf if epochs is None or math.isinf(per_epoch) else per_epoch * epochs
        return min(total, self.args.max_steps) if self.args.max_steps is not None else total

    def _manual_free(self) -> bool:
        module = self._run.module
        return module is None or bool(module.automatic_optimization)

    @property
    def is_global_zero(self) -> bool:
        return bool(self.strategy.is_global_zero)

    @property
    def world_size(self) -> int:
        return int(self.strategy.world_size)

    @property
    def global_rank(self) -> int:
        return int(self.strategy.rank)

    @property
    def local_rank(self) -> int:
        return int(getattr(self.strategy, "local_rank", 0))

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """The callbacks that write checkpoints (duck-typed: they have `best_model_path`)."""
        return [cb for cb in self.callbacks if hasattr(cb, "best_model_path")]

    @property
    def checkpoint_callback(self) -> Any:
        """The first checkpoint callback; without one (and with checkpointing on), a read-only view
        of the `last.ckpt` this Trainer writes, where Lightning has its default `ModelCheckpoint`
        (`trainer.checkpoint_callback.best_model_path` after fit)."""
        found = self.checkpoint_callbacks
        if found:
            return found[0]
        if not self.args.enable_checkpointing or self.args.fast_dev_run:
            return None
        checkpoints = self._run.checkpoints
        return DefaultCheckpoint(checkpoints.default_best_path, lambda: checkpoints.checkpoint_dir)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """Every `EarlyStopping` callback (or subclass) of this Trainer, in order."""
        return [cb for cb in self.callbacks if any(c.__name__ == "EarlyStopping" for c in type(cb).__mro__)]

    @property
    def early_stopping_callback(self) -> Any:
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def progress_bar_callback(self) -> Any:
        """The progress-bar callback (`TQDMProgressBar`, `RichProgressBar`, ...) given in
        `callbacks`, or None: the Trainer's own bar is not a callback here."""
        return next((cb for cb in self.callbacks if callable(getattr(cb, "make_progress_bar", None))), None)

    @property
    def datamodule(self) -> Any:
        """The DataModule given to fit/validate/test/predict, if any."""
        return self._run.datamodule

    # --------------------------------------------------------------- the run's stage
    @property
    def training(self) -> bool:
        """True while fit runs, outside its validation passes and sanity check."""
        fitting = self._running == "fit" or self._run.state.clock_start is not None
        return fitting and self._evaluation_stage() is None and not self._run.sanity_checking

    @property
    def validating(self) -> bool:
        """True while a validation pass runs (inside fit too; not the sanity check)."""
        stage = self._evaluation_stage()
        return (stage == "validation" or (stage is None and self._running == "validate")) and not self._run.sanity_checking

    @property
    def testing(self) -> bool:
        """True while `test` runs."""
        return self._evaluation_stage() == "test" or self._running == "test"

    @property
    def predicting(self) -> bool:
        """True while `predict` runs."""
        return self._evaluation_stage() == "predict" or self._running == "predict"

    @property
    def evaluating(self) -> bool:
        """True while validating, testing or sanity checking (Lightning's rule)."""
        return self.validating or self.testing or self._run.sanity_checking

    def _evaluation_stage(self) -> str | None:
        return getattr(getattr(self, "_eval", None), "stage", None)

    @property
    def interrupted(self) -> bool:
        """Whether the last fit/validate/test/predict ended with an exception (Ctrl-C included)."""
        return bool(self._interrupted)

    @property
    def received_sigterm(self) -> bool:
        """Whether fit was asked to stop by SIGTERM (or SLURM's requeue signal) on some rank."""
        return self._run.preempted

    @property
    def is_last_batch(self) -> bool:
        """Whether the batch being trained is the epoch's last, as Lightning's: True from its
        `on_train_batch_start` (in `training_step` too) until the next epoch starts. Always False
        for a loader without len(): Lightning learns the end by fetching a batch ahead, which
        this Trainer never does (a fetch moves the data's random streams)."""
        total = self.num_training_batches
        done = self._run.state.batches_done
        if done > 0 and done >= total:
            return True
        running = getattr(self._loop, "batch_running", -1)
        return not math.isinf(total) and running == total - 1 and running >= done

    @property
    def ckpt_path(self) -> Any:
        """The checkpoint the last fit/validate/test/predict read ("last"/"best" resolved), or None;
        after `trainer.ckpt_path = path`, that path."""
        return self._ckpt_path_set if self._ckpt_path_set is not None else self._ckpt_path

    @ckpt_path.setter
    def ckpt_path(self, path: Any) -> None:
        """Lightning's stateful form (NeMo's experiment manager sets it): the checkpoint every later
        fit/validate/test/predict reads when called without `ckpt_path=`; None forgets it."""
        self._ckpt_path_set = path if path else None

    def _chosen_ckpt_path(self, given: Any, verb: str) -> Any:
        """The `ckpt_path` a call reads: the one it was given, else the one set on the Trainer. A
        given one replaces a set one, with Lightning's warning."""
        if self._ckpt_path_set is None:
            return given
        if given is None:
            return self._ckpt_path_set
        warnings.warn(f"`trainer.ckpt_path = {self._ckpt_path_set!r}` was set, and then {verb}(ckpt_path="
                      f"{given!r}) was called: the latter is read, and the former forgotten.", UserWarning, stacklevel=3)
        self._ckpt_path_set = None
        return given

    # ------------------------------------------------------------------- data
    @property
    def train_dataloader(self) -> Any:
        """The loader fit trains on, as the Trainer prepared it (with its DistributedSampler
        under DDP); None before fit. Several combined loaders: the dict or list they came in, as Lightning's."""
        loader = self._run.train_loader
        return loader.iterables if isinstance(loader, CombinedLoader) else loader

    @property
    def val_dataloaders(self) -> Any:
        """The validation loader of the latest `fit` or `validate` (`validate` after `fit`: the one
        it used, as Lightning's); None without one."""
        validated = (self._eval_loaders or {}).get("validation")
        fitted = getattr(self._loop, "val_loader", None)
        if self._last_call == "validate" and validated is not None:
            return public_loaders(validated)
        return public_loaders(fitted if fitted is not None else validated)

    test_dataloaders = _Recorded("loader", "test")  # the loader `test` used; None before it ran
    predict_dataloaders = _Recorded("loader", "predict")  # the loader `predict` used; None before it ran
    num_test_batches = _Recorded("count", "test")  # [batches of the last `test`]; [] before it ran
    num_predict_batches = _Recorded("count", "predict")  # [batches of the last `predict`]; [] before it ran

    @property
    def enable_validation(self) -> bool:
        """Whether fit validates: a validation loader, a `validation_step` and
        `limit_val_batches` above 0 (known once training starts)."""
        return getattr(self._loop, "val_loader", None) is not None and self.args.limit_val_batches != 0

    @property
    def num_val_batches(self) -> list[int | float]:
        """Validation batches per loader ([] without one): of `validate` while it runs, else of
        fit (inf for a loader without len())."""
        if self._evaluation_stage() == "validation" and self._loop_is_idle():
            return self._eval_counts("validation")
        if not self.enable_validation:
            return self._eval_counts("validation") if self._loop is None else []
        limit = getattr(self._loop, "val_limit", None)
        limits = limit if isinstance(limit, list) else [limit]
        return [math.inf if each is None else each for each in limits]

    def _loop_is_idle(self) -> bool:
        return not getattr(self._loop, "running", False)

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        """Batches the sanity check runs: `num_sanity_val_steps` (-1: all) capped by each loader's;
        [] before any fit (fit-only, as Lightning's: `validate` alone leaves it empty)."""
        if self._loop is None:
            return []
        steps = math.inf if self.args.num_sanity_val_steps == -1 else self.args.num_sanity_val_steps
        return [min(steps, batches) for batches in self.num_val_batches]

    def _eval_counts(self, stage: str) -> list[int | float]:
        return list((self._eval_batches or {}).get(stage) or [])
