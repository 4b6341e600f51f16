"""`Trainer.fit`: a run from its loaders, checkpoint and setup through the fit loop to teardown,
under the signal guard, and what an error inside it leaves behind (a resumable last.ckpt).

The part of `Trainer` (trainer.py) that runs `fit`; the loop itself is `trainer/loops/fit.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer._utils import seed_everything
from trainer.core.compile_cache import start_compile_cache
from trainer.core.compiled_module import from_compiled
from trainer.core.data import module_defines
from trainer.core.flags import torch_flags
from trainer.loops import early_signals
from trainer.loops.batches import check_loader, check_module
from trainer.loops.combined import as_train_loader
from trainer.loops.fit import FitLoop
from trainer.loops.manual import check_manual_arguments
from trainer.loops.resume import check_resume
from trainer.states import TrainerFn
from trainer.loops.signals import SignalGuard
from trainer.module import Module

if TYPE_CHECKING:
    from trainer._args import TrainerArgs
    from trainer.loops.context import RunContext
    from trainer.loops.evaluation import EvalLoop
    from trainer.states import TrainerState
    from trainer.strategies import Strategy
    from trainer.strategies.requeue import Requeue

__all__ = ["TrainerFit"]

log = logging.getLogger("trainer")


class TrainerFit:
    """Mixed into `Trainer`: `fit`, and what an error inside it leaves behind."""

    if TYPE_CHECKING:
        args: TrainerArgs
        strategy: Strategy
        experiment_config: dict[str, Any] | None
        _run: RunContext
        _eval: EvalLoop
        _loop: FitLoop | None
        _requeue: Requeue
        _fit_loaders: Callable[[], tuple[Any, Any]] | None
        _steps_at_fit_start: int
        _handling_error: bool
        _interrupted: bool
        _running: str | None
        _last_call: str | None
        _ckpt_path: str | None

        @property
        def state(self) -> TrainerState: ...
        @property
        def global_step(self) -> int: ...
        def _loaders(self, stage: str, model: Module, datamodule: Any, *loaders: Any) -> tuple[Any, ...]: ...
        def _fit_loaders_in_order(self, model: Module, train: Any, val: Any, *, opens: bool,
                                  defer_opening: bool) -> tuple[Any, Any, bool]: ...
        def _checked_val(self, model: Module, val: Any) -> Any: ...
        def _prepare_loader(self, loader: Any, *, train: bool, fitting: bool = True) -> Any: ...
        def _setup(self, model: Module, stage: str) -> None: ...
        def _starts_run(self, model: Module) -> bool: ...
        def _chosen_ckpt_path(self, given: Any, verb: str) -> Any: ...
        def _preempt(self) -> None: ...

    def fit(
        self,
        model: Module,
        train_loader: Iterable[Any] | None = None,
        val_loader: Iterable[Any] | None = None,
        ckpt_path: str | Path | None = None,
        *,
        train_dataloaders: Iterable[Any] | None = None,
        val_dataloaders: Iterable[Any] | None = None,
        datamodule: Any = None,
        weights_only: bool | None = None,
    ) -> None:
        """Train `model` on `train_loader` until `max_epochs` or `max_steps`.

        `weights_only` is Lightning's argument for reading `ckpt_path`; it is accepted and
        changes nothing: a checkpoint is always read without executing anything.

        The loop, in pseudocode (hooks in docs/hooks.md)::

            setup(stage); move/wrap the model; configure_optimizers; restore ckpt_path
            for epoch in epochs:                                   loops/fit.py
                for window of k micro-batches (the last one may be shorter):
                    for batch in window:                           loops/automatic.py
                        with autocast: loss = training_step(batch) / len(window)
                        backward(loss)               # scaled under amp; DDP syncs on the last
                    unscale; clip; stepped = optimizer step (amp skips non-finite)
                    if stepped: step-interval schedulers
                    zero_grad(set_to_none=True); global_step += 1; log every n steps
                    on_train_batch_end; stop here at max_steps or on request
                validate; on_train_epoch_end; epoch-interval schedulers; write last.ckpt
            teardown(stage)

        With `automatic_optimization = False` the module steps its optimizers itself
        (loops/manual.py). Calling `fit` again on the same Trainer continues the same run
        (counters, optimizer and scaler kept) until the limits are reached.

        Loaders come from the arguments, a `datamodule`, or the module's own `train_dataloader()`
        / `val_dataloader()` methods (Lightning's), called after its `setup("fit")`.
        """
        ckpt_path = self._chosen_ckpt_path(ckpt_path, "fit")  # `trainer.ckpt_path = path` (Lightning's)
        self._running, self._last_call, self._interrupted = "fit", "fit", False
        try:
            with torch_flags(self.args):  # deterministic, benchmark, detect_anomaly: restored when fit ends
                self._fit(model, train_loader if train_loader is not None else train_dataloaders,
                          val_loader if val_loader is not None else val_dataloaders, ckpt_path, datamodule)
        finally:
            self._running = None

    def _fit(self, model: Module, train_loader: Any, val_loader: Any, ckpt_path: Any, datamodule: Any) -> None:
        model = from_compiled(model, self.args.compile)  # torch.compile(module): the module, compiled
        check_module(model)
        train_loader, val_loader = self._loaders("fit", model, datamodule, train_loader, val_loader)
        from_datamodule = self._run.datamodule is not None  # its loaders come once its state is restored
        if from_datamodule and not callable(getattr(self._run.datamodule, "train_dataloader", None)):
            raise ValueError(f"fit() expected the datamodule {type(self._run.datamodule).__name__} to define "
                             "train_dataloader(). Received: a datamodule without it.")
        if train_loader is None and not from_datamodule and not module_defines(model, "train_dataloader"):
            raise ValueError("fit() expected train_loader (Lightning: train_dataloaders=), datamodule=, or a "
                             f"train_dataloader() method on {type(model).__name__}. Received: none of them.")
        if train_loader is not None:
            train_loader = as_train_loader(train_loader)  # several loaders: Lightning's CombinedLoader
            check_loader(train_loader, "train_loader")
        check_manual_arguments(model, self.args)
        checkpoint = self._run.checkpoints.read_checkpoint(ckpt_path, module=model) if ckpt_path is not None else None
        resuming = checkpoint is not None  # the checkpoint's data order decides the epoch's iterator
        if checkpoint is not None:
            self._ckpt_path = checkpoint.get("_path")
        if self.args.seed is not None and self._starts_run(model):  # a continued run keeps its random streams
            seed_everything(self.args.seed)
        prepared: list[tuple[Any, Any, bool]] = []
        # a fresh epoch's first iterator is opened as fit sets up its data (Lightning's moment)
        opens = (not self._run.sweep and not resuming and self._run.state.batches_done == 0
                 and self.args.limit_train_batches != 0)

        def fit_loaders(after_fit_start: bool = False) -> tuple[Any, Any]:
            """The train loader prepared (sampler included) and the val loader, once: on
            `estimated_stepping_batches`'s request in configure_optimizers, or after on_fit_start."""
            if not prepared:
                prepared.append(self._fit_loaders_in_order(model, train_loader, val_loader, opens=opens,
                                                           defer_opening=after_fit_start))
                self._run.train_loader = prepared[0][0]  # trainer.train_dataloader from here on
            return prepared[0][0], prepared[0][1]

        self._fit_loaders = fit_loaders
        try:
            self._setup(model, "fit")
        except BaseException:
            self._fit_loaders = None
            raise
        try:
            if checkpoint is not None:
                self._run.checkpoints.restore(checkpoint)
            compile_cache = start_compile_cache(self.args, self.strategy, self._run.checkpoints, checkpoint)
            self._run.state.stop_requested = self._run.stop_request = self._run.preempted = False
            held = [checkpoint]  # let go once read: the run's checkpoints keep it until the resumed epoch's start hooks ran
            checkpoint = None

            def loaders() -> tuple[Any, Any, bool]:
                """The fit's loaders, asked for after on_fit_start as Lightning asks (a hook that
                draws random numbers comes before a dataset built in train_dataloader())."""
                train, val = fit_loaders(after_fit_start=True)
                self._run.train_loader, self._fit_loaders = train, None
                if held[0] is not None:
                    check_resume(self._run, held[0], train)
                held[0] = None
                val = self._checked_val(model, val)
                owed = prepared[0][2]  # the first iterator is still to be opened: after the sanity check
                return train, (self._prepare_loader(val, train=False) if val is not None else None), owed

            self._fit_with_signals(loaders)
            if compile_cache is not None:
                compile_cache.report()
            if self._run.simple_profiler is not None and self.strategy.is_global_zero:  # profiler="simple"
                self._run.simple_profiler.report(lambda: self._run.output.run_dir)
        finally:
            self._fit_loaders = None
            self._run.data_order.discard_opened()  # an iterator opened for an epoch that never started
            self._run.checkpoints.forget_resume()
            self._run.metrics.renew_view()
            self._run.call("teardown", TrainerFn.FITTING)
            if self._run.datamodule is not None and callable(getattr(self._run.datamodule, "teardown", None)):
                self._run.datamodule.teardown(stage=TrainerFn.FITTING)

    def _fit_with_signals(self, loaders: Callable[[], tuple[Any, Any, bool]]) -> None:
        with SignalGuard(self._preempt, self._requeue.signals) as signals:
            self._run.signals = signals
            early = early_signals.take(self._requeue.signals)  # SLURM's signal while the script started
            if early is not None:
                log.warning("%s arrived before fit: stopping at the first step boundary.", early.name)
                signals.deliver(early)
            self._run.agreement = self.strategy.store_agreement()  # DDP/FSDP: decisions made through the store
            self._steps_at_fit_start = self.global_step
            try:
                self._run.metrics.clear_latest()  # a new, empty callback_metrics dict, as Lightning's
                self._run.output.forget_shown()
                self._run.call("on_fit_start")
                train_loader, val_loader, open_after_sanity = loaders()
                self._run.checkpoints.start_run()  # the run folder's last.ckpt checked before anything is written
                self._run.output.start_run(self._run.module)
                self._loop = FitLoop(self._run, self._eval, val_loader)
                self._loop.open_after_sanity = open_after_sanity
                self._loop.run(train_loader)
                self._run.call("on_fit_end")
                self._run.checkpoints.finish_writes()  # async_checkpointing: the last write is complete (or raises)
            except BaseException as error:
                with signals.deferred():  # a second Ctrl-C can't cut the cleanup short
                    self._on_fit_error(error)
                    self.strategy.teardown(failed=True)
                raise
            finally:
                self._run.signals = self._run.agreement = None
                with signals.deferred():
                    try:
                        self._run.output.end_run(failed=self._interrupted)
                    finally:
                        self._run.checkpoints.end_run()
        self.strategy.teardown()
        if signals.terminated:
            log.warning("Stopped on %s after optimizer step %d; resume with ckpt_path='last'.", signals.received, self.global_step)
        self._requeue.after_fit(  # SLURM: every rank agrees, rank 0 requeues the job once last.ckpt is complete
            self.strategy, stopped_by_signal=self._run.preempted or signals.terminated,
            unfinished=self._loop is not None and not self._loop.finished(),
            checkpoint=self._run.checkpoints.last_path if self.args.enable_checkpointing else None,
            trained=self.global_step > self._steps_at_fit_start,
        )

    def _on_fit_error(self, error: BaseException) -> None:
        self._interrupted = True
        if self._run.optimizers is not None:
            for optimizer in self._run.optimizers.optimizers:
                optimizer.zero_grad(set_to_none=True)  # drop a half-accumulated window
        self._handling_error = True  # a save from on_exception is the last completed step (marked not clean)
        try:
            self._run.call("on_exception", error)
            if callable(getattr(self._run.datamodule, "on_exception", None)):
                self._run.datamodule.on_exception(error)
        finally:
            self._handling_error = False
        if isinstance(error, KeyboardInterrupt) and self.strategy.world_size > 1:
            log.warning("Interrupted under DDP: ranks stopped at different points, so no checkpoint is "
                        "written (send SIGTERM to stop at a step boundary with one). Resume from last.ckpt.")
        elif isinstance(error, KeyboardInterrupt):
            self._run.checkpoints.save_last()
            how = ("`trainer fit CONFIG --ckpt_path last`" if self.experiment_config  # a YAML run (the CLI)
                   else f"trainer.fit(model, loader, ckpt_path={str(self._run.checkpoints.last_path) if self._run.checkpoints.saves else None!r})")
            log.warning("Interrupted after optimizer step %d. Resume with %s.", self.global_step, how)
        elif isinstance(error, Exception) and self.strategy.world_size == 1 and self.global_step > self._steps_at_fit_start:
            try:  # keep this fit's finished steps (with none, an older last.ckpt stays); never hide the error
                self._run.checkpoints.save_last()
            except Exception as save_error:  # noqa: BLE001
                log.warning("last.ckpt could not be written after the error: %s", save_error)
