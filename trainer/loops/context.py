"""What the loops use of the Trainer, typed: `LoopHost`.

The loops run inside `Trainer.fit`/`validate`/... and are handed the Trainer itself, but they
may only touch what `LoopHost` lists, and mypy checks each use. The Trainer imports the
loops, so they can't import it back (not even for typing: the import graph has no cycles);
this Protocol is the Trainer as the loops see it, and the Trainer satisfies it structurally
(mypy checks that too, where the Trainer hands itself to a loop).

Attributes the loops only read are read-only properties here, so the Trainer may hold a
more precise type; the flags they set are plain attributes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.checkpoint.registry import StateRegistry
    from trainer.logging.metrics import MetricStore
    from trainer.logging.profiler import SimpleProfiler
    from trainer.logging.run import RunIO
    from trainer.loops.data import DataOrder
    from trainer.loops.hooks import CallbackBase, Dispatcher
    from trainer.loops.optimizers import OptimizerSetup
    from trainer.loops.signals import SignalGuard
    from trainer.loops.state import LoopState
    from trainer.module import Module
    from trainer.precision import Precision
    from trainer.strategies import Strategy

__all__ = ["LoopHost", "Evaluation", "ManualSteps", "module_of", "optimizers_of", "manual_of", "signals_of"]

T = TypeVar("T")


class Evaluation(Protocol):
    """The evaluation loop, as the fit loop runs it (`EvalLoop`)."""

    def run(
        self, loader: Any, stage: str, limit: int | None = None, before_end: Callable[[], None] | None = None
    ) -> dict[str, float] | list[Any]: ...


class ManualSteps(Protocol):
    """Manual optimization, as the fit loop runs it (`ManualOptimization`)."""

    def reset(self) -> None: ...
    def run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any: ...
    def end_window(self, batches_done: int) -> None: ...
    def batch_end_outputs(self, output: Any) -> Any: ...


class LoopHost(Protocol):
    """The Trainer as the loops see it: exactly what `loops/` reads, sets and calls."""

    # what the loops set
    _in_train_batches: bool  # where `self.log` defaults to per-step values
    _sanity_checking: bool
    _stop_request: bool  # this rank's own stop request (max_time under DDP)

    # what they read
    @property
    def args(self) -> TrainerArgs: ...
    @property
    def state(self) -> LoopState: ...
    @property
    def strategy(self) -> Strategy: ...
    @property
    def callbacks(self) -> list[CallbackBase]: ...
    @property
    def precision(self) -> Precision: ...
    @property
    def _precision(self) -> Precision: ...
    @property
    def _module(self) -> Module | None: ...
    @property
    def _opt(self) -> OptimizerSetup | None: ...
    @property
    def _train_step(self) -> Callable[..., Any]: ...
    @property
    def _metrics(self) -> MetricStore: ...
    @property
    def _io(self) -> RunIO: ...
    @property
    def _data_order(self) -> DataOrder: ...
    @property
    def _dispatch(self) -> Dispatcher: ...
    @property
    def _signals(self) -> SignalGuard | None: ...
    @property
    def _eval(self) -> Evaluation: ...
    @property
    def _manual(self) -> ManualSteps | None: ...
    @property
    def _preempted(self) -> bool: ...
    @property
    def _timer(self) -> SimpleProfiler | None: ...
    @property
    def _state_parts(self) -> StateRegistry: ...

    # what they call
    def _call(self, hook: str, *args: Any) -> None:
        """Call a hook on the callbacks and the module (`trainer/loops/hooks.py`)."""

    def _bookkeeping(self) -> contextlib.AbstractContextManager[Any]:
        """Opening bars and writing epoch-end files: not cut by an interrupt."""

    def _agree_stop(self) -> None:
        """At a point every rank passes together: stop everywhere when some rank asked to."""

    def _read_metric(self, name: str) -> float | None:
        """One logged metric as a float (a host read)."""

    def _reload_loaders(self, model: Module) -> tuple[Any, Any] | None:
        """`reload_dataloaders_every_n_epochs`: the train and val loaders again (None: passed directly)."""


def module_of(host: LoopHost) -> Module:
    """The module being run (set by `fit`/`validate`/... before any loop exists)."""
    return _present(host._module, "a loop runs only once the Trainer has a module")


def optimizers_of(host: LoopHost) -> OptimizerSetup:
    """The optimizers of the run (parsed before the training loops exist)."""
    return _present(host._opt, "the training loops run only once configure_optimizers was parsed")


def manual_of(host: LoopHost) -> ManualSteps:
    """Manual optimization (made by the Trainer's setup for a module that steps itself)."""
    return _present(host._manual, "a module with automatic_optimization = False has its ManualOptimization")


def signals_of(host: LoopHost) -> SignalGuard:
    """The signal guard of the running fit (an optimizer step happens only inside fit)."""
    return _present(host._signals, "optimizer steps happen inside fit, under its signal guard")


def _present(value: T | None, guarantee: str) -> T:
    assert value is not None, guarantee
    return value
