"""The Trainer's read-only state as properties (Lightning's names), kept apart from the loop."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.logging.metrics import to_floats

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.logging.metrics import MetricStore
    from trainer.logging.run import RunIO
    from trainer.loops.fit import FitLoop
    from trainer.loops.hooks import CallbackBase
    from trainer.loops.optimizers import OptimizerSetup
    from trainer.loops.state import LoopState
    from trainer.precision import Precision
    from trainer.strategies import Strategy

__all__ = ["TrainerProperties"]


class TrainerProperties:
    """Mixed into `Trainer`: what user code and callbacks read (never the loop's internals)."""

    state: LoopState
    args: TrainerArgs
    strategy: Strategy
    callbacks: list[CallbackBase]
    _precision: Precision
    _metrics: MetricStore
    _opt: OptimizerSetup | None
    _io: RunIO
    _loop: FitLoop | None
    _sanity_checking: bool
    _datamodule: Any

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (completed accumulation windows), skipped steps included."""
        return self.state.global_step

    @property
    def current_epoch(self) -> int:
        return self.state.epoch

    @property
    def precision(self) -> Precision:
        """The precision strategy object (AMP's has `.scaler`)."""
        return self._precision

    @property
    def callback_metrics(self) -> dict[str, float]:
        """The latest value of every logged metric, as Python floats (read on access)."""
        return to_floats(self._metrics.latest)

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The first (in automatic optimization, the only) optimizer."""
        return self._opt.optimizer if self._opt is not None else None

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Every optimizer, in the order `configure_optimizers` returned them."""
        return list(self._opt.optimizers) if self._opt is not None else []

    @property
    def lr_scheduler(self) -> Any:
        """The first LR scheduler, or None."""
        return self._opt.schedulers[0].scheduler if self._opt is not None and self._opt.schedulers else None

    @property
    def lr_scheduler_configs(self) -> list[Any]:
        """Every scheduler with when it steps (`.scheduler`, `.interval`, `.frequency`, `.monitor`)."""
        return list(self._opt.schedulers) if self._opt is not None else []

    @property
    def logger(self) -> Any:
        """The run's logger, None without one; with `logger=[...]` the first of them (Lightning's rule)."""
        loggers = self._io.loggers
        return loggers[0] if loggers else None

    @property
    def loggers(self) -> list[Any]:
        """Every logger of the run (`logger=[...]`); [] without one, and on ranks other than 0."""
        return self._io.loggers

    @property
    def history(self) -> list[dict[str, float]]:
        """One row per finished epoch of `fit`: epoch, step and that epoch's epoch-level metrics.

        Example: ``pandas.DataFrame(trainer.history).plot(x="epoch", y="val/loss")``.
        """
        return [dict(row) for row in self._io.history]

    @property
    def log_dir(self) -> Path:
        """This run's folder under `root_dir` (created when first needed)."""
        return self._io.run_dir

    @property
    def should_stop(self) -> bool:
        """Whether a stop was requested; `trainer.should_stop = True` requests one (Lightning)."""
        return bool(self.state.stop_requested)

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        if value:
            self.request_stop()

    @property
    def sanity_checking(self) -> bool:
        """True while the sanity validation before training runs (callbacks ignore it)."""
        return self._sanity_checking

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
    def logged_metrics(self) -> dict[str, float]:
        """What was last written to the logger, by name (floats)."""
        return dict(self._io.logged)

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """What the progress bar shows now (floats)."""
        return dict(self._io.shown)

    @property
    def num_training_batches(self) -> int | float:
        """Training batches per epoch (after `limit_train_batches`); inf when unknown."""
        batches = getattr(self._loop, "epoch_batches", None)
        return math.inf if batches is None else batches

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps this fit will take: from max_steps, or epochs x steps per epoch."""
        per_epoch = self.num_training_batches
        if not math.isinf(per_epoch):
            per_epoch = math.ceil(per_epoch / self.args.accumulate_grad_batches) if self._manual_free() else per_epoch
        epochs = self.args.max_epochs if self.args.max_epochs is not None else (None if self.args.max_steps else 1)
        total = math.inf if epochs is None or math.isinf(per_epoch) else per_epoch * epochs
        return min(total, self.args.max_steps) if self.args.max_steps is not None else total

    def _manual_free(self) -> bool:
        module = getattr(self, "_module", None)
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
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callback(self) -> Any:
        found = [cb for cb in self.callbacks if any(c.__name__ == "EarlyStopping" for c in type(cb).__mro__)]
        return found[0] if found else None

    @property
    def datamodule(self) -> Any:
        """The DataModule given to fit/validate/test/predict, if any."""
        return self._datamodule
