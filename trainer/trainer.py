"""`Trainer`: owns the loop and composes precision, strategy, logger, progress and callbacks."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from trainer._run import RunIO
from trainer._eval import EvalLoop
from trainer._loop_utils import (
    check_loader,
    check_module,
    empty_loader_message,
    extract_loss,
    micro_batches,
)
from trainer._metrics import MetricStore, to_floats
from trainer._optim import LoopState, OptimizerSetup, parse_optimizers
from trainer._signals import SignalGuard
from trainer._utils import length_of, move_to_device, seed_everything
from trainer.callback import Callback, _Dispatcher
from trainer.distributed import Strategy, resolve_strategy
from trainer.module import Module
from trainer.precision import Precision, resolve_precision

__all__ = ["Trainer"]

log = logging.getLogger("trainer")


class Trainer:
    """Trains a `Module` exactly as a hand-written PyTorch loop would, with less code.

    Example:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> from trainer import Trainer, Module
        >>> class Line(Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(1, 1)
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         return torch.nn.functional.mse_loss(self.net(x), y)
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.1)
        >>> data = DataLoader(TensorDataset(torch.ones(8, 1), torch.ones(8, 1)), batch_size=4)
        >>> trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False,
        ...                   enable_progress_bar=False)
        >>> trainer.fit(Line(), data)
        >>> trainer.global_step
        4

    All arguments are keyword-only and validated at construction (see README for each);
    an invalid one raises `ValueError` naming it and the accepted values.
    """

    def __init__(
        self,
        *,
        precision: str | Precision = "fp32",
        max_epochs: int | None = None,
        max_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        root_dir: str | Path = "runs",
        logger: Any = True,
        enable_progress_bar: bool = True,
        enable_checkpointing: bool = True,
        log_every_n_steps: int = 50,
        callbacks: list[Callback] | None = None,
        seed: int | None = None,
        device: str = "auto",
        strategy: str = "auto",
        nonfinite_loss: str = "error",
    ) -> None:
        from trainer._args import validate_trainer_args  # pydantic loads on first use, not on import

        arguments = dict(locals())
        arguments.pop("self")
        arguments.pop("validate_trainer_args")
        self.args = validate_trainer_args(arguments)
        self._precision = resolve_precision(precision)
        self.strategy: Strategy = resolve_strategy(self.args.strategy, self.args.device)
        self._precision.setup(self.strategy.device)  # AMP's scaler exists from the start
        self.state = LoopState()
        self.callbacks: list[Callback] = list(callbacks or [])
        self._metrics = MetricStore()
        self._io = RunIO(self)
        self._module: Module | None = None
        self._opt: OptimizerSetup | None = None
        self._dispatch = _Dispatcher(None, self.callbacks)
        self._signals: SignalGuard | None = None
        self._train_loader: Any = None
        self.experiment_config: dict[str, Any] | None = None  # a YAML run's resolved config (trainer.config)
        self._stop_request = False  # this rank's own request; see request_stop
        self._in_train_batches = False  # where `self.log` defaults to per-step values

    @classmethod
    def from_config(cls, source: Any, *, stage: str = "fit", **overrides: Any) -> Any:
        """Build the experiment a YAML file (or dict) describes, as `trainer fit` would.

        `overrides` are dotted config paths (`**{"model.init_args.hidden": 256}`) or bare
        Trainer arguments (`max_epochs=3`). Returns a `trainer.config.Experiment` with
        `.model`, `.data`, `.trainer`, `.config` and `fit()`/`validate()`/`test()`/`predict()`;
        a bad config raises `trainer.config.ConfigError` listing every problem. `stage`
        ("fit", "validate", "test" or "predict") says which loader the data must provide.

        Example:
            >>> experiment = Trainer.from_config("examples/digits_fp32.yaml", max_epochs=1)  # doctest: +SKIP
            >>> experiment.fit()  # doctest: +SKIP
        """
        from trainer.config import load_experiment

        return load_experiment(source, overrides, stage=stage)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- read-only state
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
        return self._opt.optimizer if self._opt is not None else None

    @property
    def lr_scheduler(self) -> Any:
        return self._opt.scheduler if self._opt is not None else None

    @property
    def logger(self) -> Any:
        return self._io.logger

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
        return self.state.stop_requested

    def request_stop(self) -> None:
        """Ask the loop to stop after the current optimizer step (used by EarlyStopping).

        Under DDP a request made on some ranks takes effect on all of them together at the
        next logging step (`log_every_n_steps`) or epoch end: see docs/distributed.md.
        """
        self._stop_request = True
        if self.strategy.world_size == 1:
            self.state.stop_requested = True

    def _agree_stop(self) -> None:
        """At a point every rank passes together: stop everywhere when some rank asked to."""
        if self.strategy.world_size > 1 and self.strategy.any_rank(self._stop_request):
            self.state.stop_requested = True

    # ------------------------------------------------------------------------- fit
    def fit(
        self,
        model: Module,
        train_loader: Iterable[Any],
        val_loader: Iterable[Any] | None = None,
        ckpt_path: str | Path | None = None,
    ) -> None:
        """Train `model` on `train_loader` until `max_epochs` or `max_steps`.

        The loop, in pseudocode::

            setup: seed, device, precision, configure_optimizers, restore ckpt_path
            for epoch in epochs:
                for window of k micro-batches (the last one may be shorter):
                    for batch in window:
                        with autocast: loss = training_step(batch) / len(window)
                        backward(loss)               # scaled under amp; DDP syncs on the last
                    unscale; clip; stepped = optimizer step (amp skips non-finite)
                    if stepped: scheduler.step()     # interval "step"
                    zero_grad(set_to_none=True); global_step += 1; log every n steps
                    stop here if max_steps reached or a stop was requested
                validate; epoch-end hooks; scheduler.step() (interval "epoch"); write last.ckpt

        Calling `fit` again on the same Trainer continues the same run (counters,
        optimizer and scaler kept) until the limits are reached.
        """
        check_module(model)
        check_loader(train_loader, "train_loader")
        if val_loader is not None:
            check_loader(val_loader, "val_loader")
        checkpoint = self._io.read_checkpoint(ckpt_path) if ckpt_path is not None else None
        if self.args.seed is not None and self._starts_run(model):  # a continued run keeps its random streams
            seed_everything(self.args.seed)
        self._setup(model)
        if checkpoint is not None:
            self._io.restore(checkpoint)
        self.state.stop_requested = self._stop_request = False
        self._train_loader = train_loader = self.strategy.setup_loader(train_loader, train=True)
        if val_loader is not None:
            val_loader = self.strategy.setup_loader(val_loader, train=False)
        with SignalGuard(self.request_stop) as signals:
            self._signals = signals
            try:
                self._call("on_fit_start")
                self._io.start_run(model)
                self._fit_loop(train_loader, val_loader)
                self._call("on_fit_end")
            except BaseException as error:
                with signals.deferred():  # a second Ctrl-C can't cut the cleanup short
                    self._on_fit_error(error)
                    self.strategy.teardown(failed=True)
                raise
            finally:
                self._signals = None
                with signals.deferred():
                    self._io.end_run()
        self.strategy.teardown()
        if signals.terminated:
            log.warning("Stopped on SIGTERM after optimizer step %d; resume with ckpt_path='last'.", self.global_step)

    def _bookkeeping(self) -> contextlib.AbstractContextManager[Any]:
        """Opening/closing bars and writing epoch-end files: not cut by an interrupt."""
        return self._signals.deferred() if self._signals is not None else contextlib.nullcontext()

    def _setup(self, model: Module) -> None:
        if self._starts_run(model):  # a new model (or one only evaluated so far): new optimizer, counters restart
            self._module = model
            self.state = LoopState()
            model._attach(self)
            self._train_step = self.strategy.setup_module(model)
            self._precision.setup(self.strategy.device)
            self._opt = parse_optimizers(model.configure_optimizers())
        else:
            model._attach(self)
            self._train_step = self.strategy.setup_module(model)  # teardown released the last one
        self._dispatch = _Dispatcher(model, self.callbacks)
        self._eval = EvalLoop(self)
        # Looked up once per fit, so the step pays nothing for hooks nobody overrides.
        wants = self._dispatch.wants
        self._want_batch_start, self._want_batch_end = wants("on_train_batch_start"), wants("on_train_batch_end")
        self._want_before_step, self._want_step_end = wants("on_before_optimizer_step"), wants("on_train_step_end")

    def _starts_run(self, model: Module) -> bool:
        return model is not self._module or self._opt is None

    def _finished(self) -> bool:
        args, state = self.args, self.state
        if args.max_steps is not None and state.global_step >= args.max_steps:
            return True
        max_epochs = args.max_epochs if args.max_epochs is not None else (None if args.max_steps else 1)
        return max_epochs is not None and state.epoch >= max_epochs

    def _fit_loop(self, train_loader: Any, val_loader: Any) -> None:
        if self._finished():
            log.warning(  # a warning, so a notebook (no logging configured) shows it
                "Nothing to train: the run already reached max_epochs=%s / max_steps=%s. To train further, "
                "create a Trainer with higher limits and call its fit with ckpt_path=%s.",
                self.args.max_epochs, self.args.max_steps,
                repr(str(self._io.last_path)) if self.args.enable_checkpointing else "<a trainer.save_checkpoint(path) file>",
            )
        while not self._finished() and not self.state.stop_requested:
            epoch_complete = self._train_epoch(train_loader)
            if not epoch_complete:
                break
            self._io.close_train_epoch()
            if val_loader is not None:
                self._eval.run(val_loader, "validation")
            self._call("on_train_epoch_end")
            if self._opt is not None and self._opt.interval == "epoch":
                self._opt.step_scheduler(self.callback_metrics if self._opt.monitor else None)
            self.state.epoch += 1
            self.state.batches_done = 0
            with self._bookkeeping():
                self._io.end_epoch()
            self._agree_stop()
        self._io.save_last()

    # ------------------------------------------------------------------ one epoch
    def _train_epoch(self, loader: Any) -> bool:
        """Run (the rest of) one epoch; return whether it reached its end."""
        self._in_train_batches = True
        try:
            return self._train_batches(loader)
        finally:
            self._in_train_batches = False

    def _train_batches(self, loader: Any) -> bool:
        state, args, precision, strategy = self.state, self.args, self._precision, self.strategy
        assert self._module is not None
        self._module.train()
        strategy.set_epoch(loader, state.epoch)
        total = length_of(loader)
        if total == 0:
            raise ValueError(empty_loader_message(loader))
        if state.batches_done == 0:
            self._call("on_train_epoch_start")
        iterator = self._io.epoch_iterator(loader, state.batches_done)
        with self._bookkeeping():
            self._io.progress_start_epoch(total)
        device, train_step, advance = strategy.device, self._train_step, self._io.progress_advance
        want_start, want_end = self._want_batch_start, self._want_batch_end
        window_loss: torch.Tensor | None = None
        batch_idx = state.batches_done - 1
        for batch_idx, size, last, batch in micro_batches(iterator, total, args.accumulate_grad_batches, state.batches_done):
            batch = move_to_device(batch, device)
            if want_start:
                self._call("on_train_batch_start", batch, batch_idx)
            with strategy.no_sync(last):
                with precision.autocast():
                    output = train_step(batch, batch_idx)
                loss = extract_loss(output, batch_idx)
                if loss is not None:
                    if size > 1:
                        loss = loss / size  # the window's own length: a short last window too
                    precision.backward(loss)
            if loss is not None:
                detached = loss.detach()
                window_loss = detached if window_loss is None else window_loss + detached
            advance(batch)
            if want_end:
                self._call("on_train_batch_end", output, batch, batch_idx)
            if last:
                self._end_window(window_loss, batch_idx + 1)
                window_loss = None
                if args.max_steps is not None and state.global_step >= args.max_steps:
                    state.stop_requested = True
                elif state.global_step % args.log_every_n_steps == 0:
                    self._agree_stop()  # DDP: no per-step collective, only at logging steps
                if state.stop_requested:
                    return total is not None and state.batches_done >= total
        if batch_idx + 1 > state.batches_done:  # the loader ended inside a window (len() overstated it)
            self._end_window(window_loss, batch_idx + 1)
        if total is None and state.epoch == 0 and state.batches_done == 0:
            raise ValueError(empty_loader_message(loader))
        return True

    def _end_window(self, window_loss: torch.Tensor | None, batches_done: int) -> None:
        """Close an accumulation window: guard against non-finite losses, then step."""
        if window_loss is None:  # every micro-batch was skipped (training_step returned None)
            self.state.batches_done = batches_done
            return
        # A non-finite micro-batch loss makes the window's sum non-finite, so one host read
        # per optimizer step guards the weights (amp's GradScaler makes its own read instead).
        if not self._precision.handles_nonfinite and not self.strategy.all_agree(math.isfinite(window_loss)):
            self._nonfinite_loss(batches_done)
        else:
            self._optimizer_step(window_loss, batches_done)

    def _optimizer_step(self, window_loss: torch.Tensor, batches_done: int) -> None:
        opt, precision, args, signals = self._opt, self._precision, self.args, self._signals
        assert opt is not None and signals is not None
        log_now = (self.state.global_step + 1) % args.log_every_n_steps == 0
        norm_wanted = log_now and self._io.logger is not None  # computed only to be written
        if self._want_before_step:
            self._call("on_before_optimizer_step", opt.optimizer)
        signals.in_critical = True  # SIGINT now waits for the end of the step (see _signals.py)
        try:
            norm = None
            if args.gradient_clip_val is not None:
                if args.gradient_clip_algorithm == "value" and norm_wanted:
                    norm = precision.gradient_norm(opt.optimizer)
                clipped = precision.clip_gradients(opt.optimizer, args.gradient_clip_val, args.gradient_clip_algorithm)  # type: ignore[arg-type]
                norm = clipped if clipped is not None else norm
            elif norm_wanted:
                norm = precision.gradient_norm(opt.optimizer)
            stepped = precision.optimizer_step(opt.optimizer)
            if stepped and opt.scheduler is not None and opt.interval == "step":
                opt.step_scheduler()
            opt.optimizer.zero_grad(set_to_none=True)
            self.state.global_step += 1
            self.state.batches_done = batches_done  # with the step, so on_train_step_end is a clean cut
            if not stepped:
                self.state.skipped_steps += 1
        finally:
            signals.exit_critical()
        if self._want_step_end:
            self._call("on_train_step_end", stepped)
        if log_now:
            self._io.log_step(window_loss, norm)

    def _nonfinite_loss(self, batches_done: int) -> None:
        assert self._opt is not None
        self._opt.optimizer.zero_grad(set_to_none=True)
        start = self.state.batches_done
        where = f"optimizer step {self.state.global_step + 1} (epoch {self.state.epoch}, batches {start}..{batches_done - 1})"
        if self.args.nonfinite_loss == "error":
            raise FloatingPointError(
                f"training_step returned a non-finite loss (nan or inf) at {where}; the weights were "
                "not updated. Expected finite losses: lower the learning rate, check the data, or "
                "pass Trainer(nonfinite_loss='skip') to skip such steps."
            )
        log.warning("Skipped %s: non-finite loss (nonfinite_loss='skip').", where)
        self.state.global_step += 1
        self.state.skipped_steps += 1
        self.state.batches_done = batches_done

    def _on_fit_error(self, error: BaseException) -> None:
        if self._opt is not None:
            self._opt.optimizer.zero_grad(set_to_none=True)  # drop a half-accumulated window
        self._call("on_exception", error)
        if isinstance(error, KeyboardInterrupt) and self.strategy.world_size > 1:
            log.warning("Interrupted under DDP: ranks stopped at different points, so no checkpoint is "
                        "written (send SIGTERM to stop at a step boundary with one). Resume from last.ckpt.")
        elif isinstance(error, KeyboardInterrupt):
            self._io.save_last()
            log.warning(
                "Interrupted after optimizer step %d. Resume with trainer.fit(model, loader, "
                "ckpt_path=%r).", self.global_step, str(self._io.last_path) if self._io.saves else None
            )

    # ------------------------------------------------------------ evaluation entry points
    def validate(self, model: Module, loader: Iterable[Any], ckpt_path: str | Path | None = None) -> dict[str, float]:
        """Run `validation_step` over `loader`; return the epoch-averaged metrics."""
        return self._evaluate(model, loader, "validation", ckpt_path)

    def test(self, model: Module, loader: Iterable[Any], ckpt_path: str | Path | None = None) -> dict[str, float]:
        """Run `test_step` over `loader`; return the epoch-averaged metrics."""
        return self._evaluate(model, loader, "test", ckpt_path)

    def predict(self, model: Module, loader: Iterable[Any], ckpt_path: str | Path | None = None) -> list[Any]:
        """Return the list of `predict_step` outputs over `loader`."""
        return self._evaluate(model, loader, "predict", ckpt_path)  # type: ignore[return-value]

    def _evaluate(self, model: Module, loader: Iterable[Any], stage: str, ckpt_path: Any) -> Any:
        check_module(model)
        check_loader(loader, "loader")
        checkpoint = self._io.read_checkpoint(ckpt_path) if ckpt_path is not None else None
        if model is not self._module:  # another model: a later fit starts a fresh run for it
            self._module, self._opt = model, None
            self.strategy.setup_module(model)
        model._attach(self)
        if checkpoint is not None:
            self._io.restore_weights(checkpoint)
        self._dispatch = _Dispatcher(model, self.callbacks)
        self._eval = EvalLoop(self)
        try:
            return self._eval.run(self.strategy.setup_loader(loader, train=False), stage)
        except BaseException:
            self.strategy.teardown(failed=True)
            raise

    def save_checkpoint(self, path: str | Path) -> Path:
        """Write the whole training state to `path`, atomically (see README: Checkpoints)."""
        return self._io.save(path)

    # ------------------------------------------------------------------ internals
    def _call(self, hook: str, *args: Any) -> None:
        self._dispatch.call(hook, self, self._module, *args)

    def _log_metric(self, name: str, value: Any, *, on_step: bool | None, on_epoch: bool | None, prog_bar: bool, reduce: str, batch_size: int | None) -> None:
        # Defaults: per step inside the training batch loop, per epoch everywhere else
        # (validation/test steps, epoch-end hooks).
        per_step = self._in_train_batches
        self._metrics.log(
            name,
            value,
            on_step=per_step if on_step is None else on_step,
            on_epoch=(not per_step) if on_epoch is None else on_epoch,
            prog_bar=prog_bar,
            reduce=reduce,
            batch_size=batch_size,
        )
