"""`Trainer`: owns the loop and composes precision, strategy, logger, progress and callbacks.

Its parts live in `trainer/core/`: `fit` (fit.py), `validate`/`test`/`predict` (evaluation.py),
the loaders (data.py), and its properties and settings (properties.py, settings.py).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainer.logging.metrics import MetricStore
from trainer.checkpoint.io import Checkpoints
from trainer.checkpoint.parts import trainer_parts
from trainer.checkpoint.bucket_runs import checkpoint_folder, log_root
from trainer.checkpoint.storage import RemotePath
from trainer.loops.optimizers import optimizers_or_none, parse_optimizers
from trainer.loops.state import LoopState
from trainer.logging.output import RunOutput
from trainer.loops import early_signals
from trainer.core.flags import check_flags, sync_batchnorm
from trainer.core.data import TrainerData
from trainer.core.evaluation import TrainerEvaluation
from trainer.core.fit import TrainerFit
from trainer.core.settings import TrainerSettings
from trainer.core.compile import FirstStepCheck, check_compile_options, compile_module
from trainer._utils import seed_everything
from trainer.logging.profiler import SimpleProfiler
from trainer.loops.data_order import DataOrder
from trainer.loops.evaluation import EvalLoop
from trainer.loops.fit import FitLoop
from trainer.loops.manual import ManualOptimization
from trainer.loops.context import RunContext
from trainer.loops.hooks import CallbackBase, Dispatcher, checkpoint_callbacks_last, with_module_callbacks
from trainer.strategies import Strategy, resolve_strategy
from trainer.strategies.launch import launch_processes
from trainer.strategies.requeue import Requeue
from trainer import states

# Lightning's `from lightning.pytorch.trainer.states import RunningStage, TrainerFn` reads
# `from trainer.trainer.states import ...` here (Python finds a submodule in sys.modules first)
sys.modules[f"{__name__}.states"] = states
from trainer.module import Module
from trainer.core.activation_checkpointing import checkpoint_activations
from trainer.precision import Precision, needs_closure
from trainer.lightning.arguments import precision_of, translate

__all__ = ["Trainer"]

log = logging.getLogger("trainer")


class Trainer(TrainerSettings, TrainerData, TrainerEvaluation, TrainerFit):
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

    All arguments are keyword-only and validated at construction (see docs/arguments.md for each);
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
        progress_lines: bool | dict[str, Any] | None = None,
        performance_metrics: bool = True,
        activation_checkpointing: bool | int | list[Any] = False,
        enable_checkpointing: bool = True,
        log_every_n_steps: int = 50,
        callbacks: Sequence[CallbackBase] | None = None,
        seed: int | None = None,
        device: str = "auto",
        strategy: str | Strategy = "auto",
        devices: int | str | list[int] = 1,
        nonfinite_loss: str = "error",
        nonfinite_lr_backoff: float = 0.5,
        loss_spike_factor: float | None = None,
        nonfinite_grad_norm: bool = False,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int = 2,
        isolate_validation_rng: bool = False,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        fast_dev_run: bool | int = False,
        min_epochs: int | None = None,
        min_steps: int | None = None,
        max_time: Any = None,
        compile: bool | dict[str, Any] = False,
        profiler: bool | str | dict[str, Any] | SimpleProfiler | Any | None = None,
        requeue: bool | None = None,
        requeue_signal: str | None = "SIGUSR1",
        run_name: str | None = None,
        keep_last_checkpoints: int = 1,
        async_checkpointing: bool = False,
        storage_options: dict[str, Any] | None = None,
        enable_model_summary: bool = True,
        deterministic: bool | str | None = None,
        benchmark: bool | None = None,
        detect_anomaly: bool = False,
        sync_batchnorm: bool = False,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        overfit_batches: int | float = 0.0,
        reload_dataloaders_every_n_epochs: int = 0,
        barebones: bool = False,
        enable_autolog_hparams: bool = True,
        **lightning_arguments: Any,
    ) -> None:
        from trainer._args import TrainerArgs, fast_dev_run_args, validate_trainer_args  # pydantic loads on first use

        arguments = dict(locals())
        for local in ("self", "TrainerArgs", "fast_dev_run_args", "validate_trainer_args", "lightning_arguments"):
            arguments.pop(local)
        arguments = translate(arguments, lightning_arguments, TrainerArgs.model_fields)  # Lightning's spellings
        self.args = check_flags(validate_trainer_args(arguments, CallbackBase))  # barebones, overfit_batches
        if self.args.fast_dev_run:  # validated first, then overridden (writes nothing)
            self.args = fast_dev_run_args(self.args)
        check_compile_options(self.args.compile, self.args.accumulate_grad_batches)  # CUDA graphs: no accumulation
        launch_processes(self.args.devices, self.args.strategy, self.args.device)  # devices=N outside torchrun: this process is rank 0
        if self.args.seed is not None:  # the model a script builds next is seeded too; a run's start seeds again
            seed_everything(self.args.seed)
        strategy = resolve_strategy(self.args.strategy, self.args.device)
        precision = precision_of(self.args.precision, strategy.device)  # Lightning's names: by device
        self._requeue = Requeue(self.args.requeue, self.args.requeue_signal)  # SLURM: the warning signal, requeueing
        if self._requeue.in_slurm:  # this Trainer's warning signal is noted until fit takes it; SIGUSR1 otherwise freed
            early_signals.adopt(self._requeue.signals)
        strategy.setup_precision(precision)  # AMP's scaler exists from the start
        self.callbacks: list[CallbackBase] = checkpoint_callbacks_last(list(self.args.callbacks or []))
        simple = (profiler if isinstance(profiler, SimpleProfiler) else SimpleProfiler()) if self.args.profiler == "simple" else None
        self._run = run = RunContext(self, self.args, strategy, precision, MetricStore(), DataOrder(),
                              Dispatcher(None, self.callbacks), simple)
        run.output = RunOutput(run)
        run.checkpoints = Checkpoints(run)
        run.set_loader_source(self._reload_loaders)
        run.manual_class = ManualOptimization
        self.experiment_config: dict[str, Any] | None = None  # a YAML run's resolved config (trainer.config)
        self._loop: FitLoop | None = None
        self._eval = EvalLoop(run)
        # while fit sets up (configure_optimizers): its train loader, prepared on first request
        self._fit_loaders: Callable[[], tuple[Any, Any]] | None = None
        self._loader_source: Callable[..., Any] | None = None  # reload_dataloaders_every_n_epochs
        self._warned_no_validation_step = False
        self._steps_at_fit_start = 0  # an error keeps last.ckpt only when this fit took steps
        self._handling_error = False
        run.state_parts = trainer_parts(run)  # what a checkpoint holds, each part registered once

    @property
    def default_root_dir(self) -> Path:
        """Lightning's name of `root_dir` (for a URL: the local folder of the run's logs)."""
        return log_root(self.args.root_dir)

    @property
    def checkpoint_dir(self) -> Any:
        """The folder of this run's checkpoints: `trainer.log_dir`, or its counterpart under
        `root_dir` when that is a URL (`s3://bucket/prefix/default/version_0`)."""
        return checkpoint_folder(Path(self.log_dir), self.args.root_dir, self.args.storage_options)

    @property
    def lightning_module(self) -> Module | None:
        """The module being (or last) run (Lightning's name)."""
        return self._run.module

    @property
    def profiler(self) -> SimpleProfiler | None:
        """`profiler="simple"`: its report so far is `trainer.profiler.summary()` (Lightning's); else None."""
        return self._run.simple_profiler

    def request_stop(self) -> None:
        """Ask the loop to stop after the current optimizer step (used by EarlyStopping).

        Under DDP a request made on some ranks takes effect on all of them together at the
        next logging step (`log_every_n_steps`) or epoch end: see docs/distributed.md.
        """
        self._run.request_stop()

    def _preempt(self) -> None:
        """SIGTERM: stop at the next step boundary even before min_epochs/min_steps (a
        cluster's grace period is short; the checkpoint written then resumes exactly)."""
        self._run.preempted = True
        self._run.request_stop()

    def uninterruptible(self) -> contextlib.AbstractContextManager[Any]:
        """A block Ctrl-C does not cut: a SIGINT arriving inside it raises `KeyboardInterrupt`
        when the block ends. For a callback whose change must happen whole or not at all
        (weight averaging swaps the averaged weights in and out with it), so the checkpoint
        written on the interrupt never holds it half done. SIGTERM and SLURM's warning signal
        only ever request a stop at the next step boundary. Outside `fit` it does nothing.

        Example:
            >>> from trainer import Trainer
            >>> with Trainer(logger=False, enable_checkpointing=False).uninterruptible():
            ...     pass
        """
        return self._run.uninterruptible()

    def _setup(self, model: Module, stage: str) -> None:
        new_run = self._starts_run(model)
        if new_run:  # a new model (or one only evaluated so far): new optimizer, counters restart
            self._run.module = model
            self._run.state = LoopState()
        model._attach(self, self._run)
        if not self._run.sweep:
            self.callbacks = with_module_callbacks(self.callbacks, model)
        self._run.hooks = Dispatcher(model, self.callbacks, self._run.simple_profiler)
        self._run.call("setup", states.TrainerFn(stage))  # Lightning passes the enum (equal to "fit"); before the model is moved or wrapped: layers made here count
        if type(model).configure_model is not Module.configure_model:
            model.configure_model()  # Lightning's: after setup, before configure_optimizers (each stage)
        if self.args.sync_batchnorm:
            sync_batchnorm(model, self.strategy.world_size)
        if self.args.activation_checkpointing:  # before compile and wrapping; once per model
            checkpoint_activations(model, self.args.activation_checkpointing)
        probe = None
        if self.args.compile:
            # In place (what nn.Module.compile does): state-dict keys stay as they are, so checkpoints
            # move freely between compiled and eager runs; DDP then wraps the compiled module.
            probe = compile_module(model, self.args.compile if isinstance(self.args.compile, dict) else {})
        self._run.train_step = self.strategy.setup_module(model)  # teardown released the last one
        if probe is not None and not probe.checked:  # compile=True that compiled nothing that runs: said once
            self._run.train_step = FirstStepCheck(self._run.train_step, probe)
        if new_run:
            self._run.precision.setup(self.strategy.device)
            setup = parse_optimizers(optimizers_or_none(model), manual=not model.automatic_optimization)
            self.strategy.check_optimizers(setup.optimizers)  # e.g. FSDP's cpu_offload: no fused step
            self._run.optimizers = setup
            closure_steps = [type(o).__name__ for o in self._run.optimizers.optimizers if needs_closure(o)]
            if model.automatic_optimization and closure_steps:
                self._run.optimizers = None
                raise ValueError(
                    f"configure_optimizers() of {type(model).__name__} returned {closure_steps[0]}, which evaluates the "
                    "loss itself through a closure; the automatic loop here runs each batch's forward and backward "
                    "once. Expected manual optimization: `self.automatic_optimization = False` in __init__, then in "
                    "training_step `opt = self.optimizers()` and `opt.step(closure=closure)` with a closure that "
                    "calls opt.zero_grad(), computes the loss, calls self.manual_backward(loss) and returns it "
                    "(docs/manual_optimization.md)."
                )
            if model.automatic_optimization and len(self._run.optimizers.optimizers) > 1:
                count = len(self._run.optimizers.optimizers)
                self._run.optimizers = None
                raise ValueError(
                    f"configure_optimizers() of {type(model).__name__} returned {count} optimizers, but "
                    "automatic optimization steps exactly one. Expected one optimizer, or set "
                    "`self.automatic_optimization = False` in __init__ and step each optimizer in "
                    "training_step (self.optimizers(), self.manual_backward(loss), opt.step()); see "
                    "docs/manual_optimization.md."
                )
        self._run.manual = None if model.automatic_optimization else ManualOptimization(self._run)
        self._eval = EvalLoop(self._run)

    def _starts_run(self, model: Module) -> bool:
        return model is not self._run.module or self._run.optimizers is None

    def save_checkpoint(self, path: str | Path | None = None, weights_only: bool = False, *,
                        filepath: str | Path | None = None, storage_options: Any = None) -> Path | RemotePath:
        """Write the whole training state to `path`, atomically (see docs/checkpoints.md);
        `weights_only=True` writes the module's weights alone (they evaluate, not resume).
        From `on_exception`, the state of the last completed step is written even inside a
        window, marked as not an exact cut (a resume says so), as the Trainer's own last.ckpt.
        `filepath` is Lightning's name of `path`; `storage_options` (Lightning's, for remote
        storage plugins) must stay None."""
        if storage_options is not None:
            raise ValueError("save_checkpoint(storage_options=...) is for Lightning's remote checkpoint plugins, "
                             f"which are not provided here. Expected None. Received: {storage_options!r}.")
        if (path is None) == (filepath is None):
            raise ValueError("save_checkpoint() expected one path (`path`, or Lightning's `filepath`). "
                             f"Received: path={path!r}, filepath={filepath!r}.")
        target = path if path is not None else filepath
        assert target is not None
        return self._run.checkpoints.save(target, weights_only=weights_only, allow_partial=self._handling_error)

    def check_checkpoint_path(self, path: Any) -> None:
        """Before any step: a checkpoint location that is a URL (`s3://...`) can be used (its bucket
        exists, the credentials are accepted, the endpoint answers), or an error names the path and
        what to check. Nothing for a local path."""
        self._run.checkpoints.check_location(path)

    def remove_checkpoint(self, path: str | Path) -> None:
        """Delete a checkpoint file or folder (rank 0), only once the write in flight is
        complete (`async_checkpointing`): what replaces it is on disk first."""
        self._run.checkpoints.remove_checkpoint(path)
