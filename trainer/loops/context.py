"""`RunContext`: what the loops work with, in one typed object with public fields.

The Trainer builds one `RunContext` at construction and hands it to every loop, as torchtnt
hands its `State` down: the loops read the module, the precision, the strategy, the loop
state, the hooks, the metric store and the run's output from here, never from the Trainer.

    Trainer ──owns──> RunContext ──owns──> LoopState, MetricStore, RunOutput, Checkpoints, DataOrder, Dispatcher
       │                  ^
       └──owns──> FitLoop, EvalLoop, AutomaticOptimization (each holds the context)

The context holds the Trainer weakly (hooks receive it as their first argument), so dropping
the Trainer frees the run without the cyclic garbage collector. Fields that change over a
Trainer's life (a new module starts a new `LoopState`, every stage rebuilds the hooks) are
replaced on the context, so every loop sees the new value.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from trainer.loops.state import LoopState

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.checkpoint.io import Checkpoints
    from trainer.checkpoint.registry import StateRegistry
    from trainer.logging.metrics import MetricStore
    from trainer.logging.profiler import SimpleProfiler
    from trainer.logging.output import RunOutput
    from trainer.loops.data_order import DataOrder
    from trainer.loops.hooks import CallbackBase, Dispatcher
    from trainer.loops.optimizers import OptimizerSetup
    from trainer.loops.signals import SignalGuard
    from trainer.module import Module
    from trainer.precision import Precision
    from trainer.strategies import Strategy
    from trainer.strategies.agreement import StoreAgreement

__all__ = ["RunContext", "Evaluation", "ManualSteps", "module_of", "optimizers_of", "manual_of", "signals_of"]


T = TypeVar("T")


class Evaluation(Protocol):
    """The evaluation loop, as the fit loop runs it (`EvalLoop`)."""

    def run(
        self, loader: Any, stage: str, limit: int | None | list[int | None] = None,
        before_end: Callable[[], None] | None = None, *, during_fit: bool = False,
    ) -> Any: ...


class ManualSteps(Protocol):
    """Manual optimization, as the fit loop runs it (`ManualOptimization`)."""

    def reset(self) -> None: ...
    def run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any: ...
    def end_window(self, batches_done: int) -> None: ...
    def batch_end_outputs(self, output: Any) -> Any: ...
    def cut_problem(self) -> str | None: ...


class RunContext:
    """One Trainer's running state and services, as the loops, checkpoints and run output use them."""

    output: RunOutput  # set right after construction: it reads the run it belongs to
    checkpoints: Checkpoints  # likewise: saving, reading and restoring the run's checkpoints
    state_parts: StateRegistry  # what a checkpoint holds (checkpoint/parts.py), set by the Trainer
    manual_class: Callable[[RunContext], ManualSteps]  # manual optimization, made on a module's first request

    def __init__(self, trainer: object, args: TrainerArgs, strategy: Strategy, precision: Precision,
                 metrics: MetricStore, data_order: DataOrder, hooks: Dispatcher,
                 simple_profiler: SimpleProfiler | None) -> None:
        self._trainer = weakref.ref(trainer)
        self.args = args
        self.strategy = strategy
        self.precision = precision
        self.state = LoopState()
        self.metrics = metrics
        self.data_order = data_order  # the order of the epoch's batches, for exact resume (loops/data_order.py)
        self.hooks = hooks
        self.simple_profiler = simple_profiler  # profiler="simple"
        self.module: Module | None = None
        self.optimizers: OptimizerSetup | None = None
        self.train_step: Callable[..., Any] = _no_step
        self.manual: ManualSteps | None = None
        self.signals: SignalGuard | None = None  # while fit runs
        self._fit_loop: Callable[[], Any] = lambda: None
        self.datamodule: Any = None
        self.train_loader: Any = None
        self.at_run_start: list[Callable[[], None]] = []  # what the YAML layer runs once a run starts
        # The learning-rate sweep's own run (tuner.py): without the module's configure_callbacks() (they
        # are the user's run's), its loader opened when its epoch starts (its iterator is its own)
        self.sweep = False
        self._reload: Callable[[], Callable[[Module, str], tuple[Any] | None] | None] = lambda: None
        # what the loops set
        self.in_train_batches = False  # where `self.log` defaults to per-step values
        self.sanity_checking = False
        self.stop_request = False  # this rank's own stop request (max_time under DDP, EarlyStopping)
        self.preempted = False  # SIGTERM: the stop does not wait for min_epochs/min_steps
        self.agreement: StoreAgreement | None = None  # DDP/FSDP, while fit runs: a signal's stop step, skips

    @property
    def trainer(self) -> Any:
        """The Trainer this run belongs to (what hooks receive first)."""
        trainer = self._trainer()
        if trainer is None:
            raise RuntimeError("The Trainer of this run no longer exists.")
        return trainer

    @property
    def fit_loop(self) -> Any:
        """The running (or last) fit loop, None before the first fit (held weakly: the Trainer owns it)."""
        return self._fit_loop()

    @fit_loop.setter
    def fit_loop(self, loop: Any) -> None:
        self._fit_loop = weakref.ref(loop)

    @property
    def optimization(self) -> Any:
        """The fit loop's optimization (what `Module.clip_gradients` calls), None before fit."""
        loop = self._fit_loop()
        return None if loop is None else loop.optimization

    # The Trainer's public face, as a checkpoint records it (checkpoint/host.py's StateHost).
    @property
    def callbacks(self) -> list[CallbackBase]:
        return self.hooks.callbacks

    @property
    def loggers(self) -> list[Any]:
        return self.output.loggers

    @property
    def experiment_config(self) -> dict[str, Any] | None:
        return self.trainer.experiment_config  # type: ignore[no-any-return]

    def set_loader_source(self, reload: Callable[[Module, str], tuple[Any] | None]) -> None:
        """`reload_dataloaders_every_n_epochs`: how the Trainer makes the loaders again (held weakly)."""
        self._reload = weakref.WeakMethod(reload)  # type: ignore[arg-type]

    def reload_loader(self, module: Module, part: str) -> tuple[Any] | None:
        """The train (`part="train"`) or val loader again, prepared, as a 1-tuple (None: the
        loaders were passed to fit directly)."""
        reload = self._reload()
        return None if reload is None else reload(module, part)

    def call(self, hook: str, *args: Any) -> Any:
        """Call a hook on the callbacks and the module (`trainer/loops/hooks.py`); what the module's returned."""
        return self.hooks.call(hook, self._trainer(), self.module, *args)

    def uninterruptible(self) -> contextlib.AbstractContextManager[Any]:
        """Opening bars and writing epoch-end files: not cut by an interrupt (inside fit)."""
        return self.signals.deferred() if self.signals is not None else contextlib.nullcontext()

    def request_stop(self) -> None:
        """Stop after the current optimizer step; under DDP every rank agrees first (`agree_stop`)."""
        self.stop_request = True
        if self.strategy.world_size == 1:
            self.state.stop_requested = True

    def agree_stop(self) -> None:
        """At a point every rank passes together: stop everywhere when some rank asked to."""
        if self.strategy.world_size > 1:
            level = 2 if self.preempted else int(self.stop_request)
            agreed = -self.strategy.fewest(-level)  # the largest over ranks, in one collective
            if agreed:
                self.state.stop_requested = True
            self.preempted = agreed == 2

    def agree_preemption(self) -> None:
        """At every optimizer-step boundary of a rank that received SIGTERM or SLURM's signal
        (`preempted`): agree through the job's store on the step every rank stops after
        (strategies/agreement.py); no collective, no device work."""
        agreement = self.agreement
        if agreement is not None and not self.state.stop_requested and agreement.stop_here(self.state.global_step):
            self.state.stop_requested = True

    def read_metric(self, name: str) -> float | None:
        """One logged metric as a float (a host read, made only when a scheduler monitors it)."""
        from trainer.logging.metrics import to_floats

        value = self.metrics.latest.get(name)
        return None if value is None else to_floats({name: value})[name]

    # What Module.optimizers()/manual_backward()/log() call (the Module never imports the loops).
    def optimizer_setup(self) -> OptimizerSetup:
        if self.optimizers is None:
            raise RuntimeError(
                "The optimizers exist once fit has started: expected self.optimizers() / "
                "self.lr_schedulers() to be called from training hooks, not from __init__ or evaluation."
            )
        return self.optimizers

    def progress_bar(self) -> Any:
        """The progress bar on screen (None when none is open): `Module.print` writes above it."""
        return self.output.progress_bar

    def manual_optimization(self) -> ManualSteps:
        self.optimizer_setup()
        if self.manual is None:
            self.manual = self.manual_class(self)
        return self.manual

    def log_metric(self, name: str, value: Any, *, on_step: bool | None, on_epoch: bool | None, prog_bar: bool,
                   reduce: str, batch_size: int | None, logger: bool = True, add_dataloader_idx: bool = True) -> None:
        # Defaults: per step inside the training batch loop, per epoch everywhere else
        # (validation/test steps, epoch-end hooks), including a validation that runs inside
        # the training batch loop (val_check_interval): it reduces like the epoch-end one.
        metrics = self.metrics
        per_step = self.in_train_batches and not metrics.evaluating
        if not logger:
            metrics.hidden.add(name)
        metrics.log(
            name,
            value,
            on_step=per_step if on_step is None else on_step,
            on_epoch=(not per_step) if on_epoch is None else on_epoch,
            prog_bar=prog_bar,
            reduce=reduce,
            batch_size=batch_size,
            add_dataloader_idx=add_dataloader_idx,
        )


def _no_step(*args: Any) -> Any:
    raise RuntimeError("The training step exists once the Trainer's setup has wrapped the module.")


def module_of(context: RunContext) -> Module:
    """The module being run (set by `fit`/`validate`/... before any loop exists)."""
    return _present(context.module, "a loop runs only once the Trainer has a module")


def optimizers_of(context: RunContext) -> OptimizerSetup:
    """The optimizers of the run (parsed before the training loops exist)."""
    return _present(context.optimizers, "the training loops run only once configure_optimizers was parsed")


def manual_of(context: RunContext) -> ManualSteps:
    """Manual optimization (made by the Trainer's setup for a module that steps itself)."""
    return _present(context.manual, "a module with automatic_optimization = False has its ManualOptimization")


def signals_of(context: RunContext) -> SignalGuard:
    """The signal guard of the running fit (an optimizer step happens only inside fit)."""
    return _present(context.signals, "optimizer steps happen inside fit, under its signal guard")


def _present(value: T | None, guarantee: str) -> T:
    assert value is not None, guarantee
    return value
