"""A run's input and output: its folder, logger, progress bar and checkpoints.

The loop calls these few methods and knows nothing of TensorBoard, tqdm or files.
Only the global-zero rank writes anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from trainer import checkpoint as ckpt
from trainer.checkpoint.host import Position, StateHost
from trainer.checkpoint.sharded import is_sharded, read_sharded, save_sharded
from trainer.logging.metrics import MetricStore, SummaryHost, batch_size_of, fit_summary, to_floats
from trainer.logging.multi import LoggerList
from trainer.logging.loggers import TensorBoardLogger, next_version_dir
from trainer.logging.progress import ProgressBar

__all__ = ["RunIO", "RunHost"]

log = logging.getLogger("trainer")


class RunPosition(Position, Protocol):
    """Where the loop is (`LoopState`), with what RunIO reports of it."""

    @property
    def global_step(self) -> int: ...
    @property
    def skipped_steps(self) -> int: ...


class RunHost(StateHost, SummaryHost, Protocol):
    """The Trainer as `RunIO` sees it: what checkpoints and the summary read, and the rest below."""

    _at_run_start: list[Callable[[], None]]  # what the YAML layer runs once a run starts

    @property
    def state(self) -> RunPosition: ...
    @property
    def current_epoch(self) -> int: ...
    @property
    def _metrics(self) -> MetricStore: ...
    @property
    def _sanity_checking(self) -> bool: ...


class RunIO:
    def __init__(self, trainer: RunHost) -> None:
        self.trainer = trainer
        args = trainer.args
        self._run_dir: Path | None = None
        self._logger: Any = None
        self._logger_arg = args.logger
        self._progress: ProgressBar | None = None
        self._hparams_logged = False
        self.saves = 0
        self._resumed_inside_epoch: dict[str, Any] | None = None  # until that epoch's start hooks ran
        self._last_log_time: float | None = None
        self._last_log_step = 0
        self._samples = 0  # samples seen since the last log (first tensor's dim 0 of each batch)
        self._samples_known = True
        self._summary_logged = False
        self._in_fit = False
        self._epoch_record: dict[str, float] = {}
        self.history: list[dict[str, float]] = []
        self.logged: dict[str, float] = {}  # trainer.logged_metrics
        self.shown: dict[str, float] = {}  # trainer.progress_bar_metrics

    # ------------------------------------------------------------------- run folder
    @property
    def writes(self) -> bool:
        return self.trainer.strategy.is_global_zero

    @property
    def logging_on(self) -> bool:
        """Whether the run logs at all: the same answer on every rank (only rank 0 has the
        logger), so work that needs every rank (FSDP's global gradient norm) agrees."""
        return self._logger_arg is not False and self._logger_arg is not None

    @property
    def logger(self) -> Any:
        if self._logger is None and self.writes and self._logger_arg is not False:
            if self._logger_arg is True:
                self._logger = TensorBoardLogger(self.trainer.args.root_dir)
            elif isinstance(self._logger_arg, list):  # logger=[...]: the same values to each
                self._logger = LoggerList(self._logger_arg)
            else:
                self._logger = self._logger_arg
        return self._logger

    @property
    def loggers(self) -> list[Any]:
        """Every logger this process writes to (`logger=[...]`'s list; [] on ranks other than 0)."""
        logger = self.logger
        return [] if logger is None else list(logger.loggers) if isinstance(logger, LoggerList) else [logger]

    @property
    def run_dir(self) -> Path:
        if self._run_dir is None:
            logger = self.logger
            if logger is not None and getattr(logger, "log_dir", None) is not None:
                self._run_dir = Path(logger.log_dir)
            else:
                self._run_dir = next_version_dir(self.trainer.args.root_dir, "default")
        return self._run_dir

    @property
    def last_path(self) -> Path:
        return self.run_dir / "last.ckpt"

    # --------------------------------------------------------------------- lifecycle
    def run_start_actions(self) -> None:
        """What the YAML layer asked to do once a run really starts (write config.yaml)."""
        actions, self.trainer._at_run_start = list(self.trainer._at_run_start), []
        for action in actions:
            action()

    def start_run(self, module: Any) -> None:
        """Open the progress bar; once per run: the summary line and the hyperparameters."""
        self.run_start_actions()
        args = self.trainer.args
        self._in_fit = True
        self._epoch_record = {}
        self.trainer._metrics.clock = lambda: self.trainer.global_step  # per-step values: one per optimizer step
        strategy = self.trainer.strategy
        if strategy.world_size > 1 and (args.logger is not False or args.enable_checkpointing):
            # Every rank uses rank 0's folder (for last.ckpt paths); only rank 0 creates it.
            self._run_dir = Path(strategy.broadcast_object(str(self.run_dir) if self.writes else None))
        if self.writes and not self._summary_logged:
            log.info("%s", fit_summary(self.trainer, module))
            self._summary_logged = True
        if self.writes and args.enable_progress_bar:
            self._progress = ProgressBar()
        logger = self.logger
        if logger is not None and not self._hparams_logged:
            params = {
                "module": dict(getattr(module, "hparams", {}) or {}),
                "trainer": {k: v for k, v in args.model_dump().items() if k not in ("callbacks", "logger")},
            }
            params["trainer"]["precision"] = getattr(self.trainer.precision, "name", str(args.precision))
            experiment = getattr(self.trainer, "experiment_config", None)  # set by trainer.config for YAML runs
            if experiment:
                # Each value once: the YAML's model/data/seed; its trainer section is the one above.
                params = {"trainer": params["trainer"], "experiment": {k: v for k, v in experiment.items() if k != "trainer"}}
            logger.log_hyperparams(params)
            self._hparams_logged = True
        self._last_log_time = time.perf_counter()
        self._last_log_step = self.trainer.global_step
        self._samples, self._samples_known = 0, True

    def end_run(self) -> None:
        """Close the bars and the logger; runs in `fit`'s finally, so also after an error."""
        self._in_fit = False
        try:
            if self._progress is not None:
                self._progress.close()
        finally:
            self._progress = None
            if self._logger is not None:
                self._logger.flush()
                self._logger.close()

    def end_epoch(self) -> None:
        """After a finished epoch: one `history` row, flush the event file, write last.ckpt."""
        self.close_train_epoch()  # what epoch-end hooks logged with on_epoch=True: this epoch's, not the next's
        if self._in_fit:
            row = {"epoch": float(self.trainer.current_epoch - 1), "step": float(self.trainer.global_step)}
            row.update(self._epoch_record)
            self.history.append(row)
            self._epoch_record = {}
        if self._logger is not None:
            self._logger.flush()
        self.save_last()

    # ---------------------------------------------------------------------- logging
    def log_step(self, window_loss: torch.Tensor | None, grad_norm: torch.Tensor | None) -> None:
        trainer = self.trainer
        values: dict[str, Any] = {"train/loss": window_loss} if window_loss is not None else {}
        if grad_norm is not None:
            values["train/grad_norm"] = grad_norm
        scale = trainer.precision.loss_scale()
        if scale is not None:
            values["train/loss_scale"] = scale
        values.update(trainer._metrics.take_step_values())  # a name the user logged: the user's value
        floats = to_floats(values)  # the one host read of this logging interval
        automatic: dict[str, float] = {}
        if scale is not None or trainer.args.nonfinite_loss == "skip":
            automatic["train/skipped_steps"] = float(trainer.state.skipped_steps)
        for k, optimizer in enumerate(trainer.optimizers):  # optimizer k > 0 (manual optimization): lr-optK-groupN
            for i, group in enumerate(optimizer.param_groups):
                lr = group["lr"]
                automatic[f"train/lr-{f'opt{k}-' if k else ''}group{i}"] = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
        now = time.perf_counter()
        if self._last_log_time is not None and now > self._last_log_time:
            elapsed = now - self._last_log_time
            automatic["train/steps_per_sec"] = (trainer.global_step - self._last_log_step) / elapsed
            if self._samples_known and self._samples:
                automatic["train/samples_per_sec"] = self._samples / elapsed
        floats = {**automatic, **floats}
        self._last_log_time, self._last_log_step = now, trainer.global_step
        self._samples, self._samples_known = 0, True
        trainer._metrics.update_latest(floats)
        self.logged.update(floats)
        if self.logger is not None:
            self.logger.log_metrics(floats, step=trainer.global_step)
        shown = {"loss": floats["train/loss"]} if "train/loss" in floats else {}
        shown.update({k: floats[k] for k in trainer._metrics.prog_bar if k in floats and k != "train/loss"})
        self.shown.update(shown)
        if self._progress is not None:
            self._progress.set_postfix(self.shown)

    def close_train_epoch(self) -> None:
        """Reduce what training_step logged with on_epoch=True and write it."""
        values = self.trainer._metrics.close_epoch(self.trainer.strategy.reduce_epoch)
        if values:
            self.log_eval(to_floats(values))

    def log_eval(self, results: dict[str, float]) -> None:
        """Write epoch-level results at `global_step`; inside fit they join the epoch's `history` row."""
        if self._in_fit:
            self._epoch_record.update(results)
        hidden = self.trainer._metrics.hidden
        written = {k: v for k, v in results.items() if k not in hidden and k.removesuffix("_epoch") not in hidden}
        self.logged.update(written)
        on_bar = {k: v for k, v in results.items() if k in self.trainer._metrics.prog_bar}
        if on_bar and self._in_fit and not self.trainer._sanity_checking:
            self.shown.update(on_bar)  # the epoch's bar, kept on screen, shows its validation metrics
            if self._progress is not None:
                self._progress.set_postfix(self.shown)
        if self.logger is not None and written and self.trainer._module is not None:
            self.logger.log_metrics(written, step=self.trainer.global_step)
            if not self._in_fit:  # standalone validate/test: leave no writer open
                self.logger.flush()
                self.logger.close()

    # --------------------------------------------------------------------- progress
    def progress_start_epoch(self, total: int | None) -> None:
        self.shown = {}
        # Throughput is measured within an epoch: validation time never counts as training.
        self._last_log_time, self._last_log_step = time.perf_counter(), self.trainer.global_step
        self._samples, self._samples_known = 0, True
        if self._progress is not None:
            self._progress.start_train_epoch(self.trainer.current_epoch, total)
            done = self.trainer.state.batches_done
            if done:
                self._progress.advance(done)

    def progress_advance(self, batch: Any = None) -> None:
        """One micro-batch done: count its samples (tensor metadata only, no host sync)."""
        if self._samples_known and self._logger is not None:  # counted only when written
            size = batch_size_of(batch)
            if size is None:
                self._samples_known = False
            else:
                self._samples += size
        if self._progress is not None:
            self._progress.advance()

    def progress_start_eval(self, stage: str, total: int | None) -> None:
        self.trainer._metrics.evaluating = True  # per-step values logged now stay out of train/
        if self.trainer._sanity_checking:
            return  # a few batches before training: no bar of their own (nothing to watch)
        if self._progress is None and self.writes and self.trainer.args.enable_progress_bar:
            self._progress = ProgressBar()
        if self._progress is not None:
            self._progress.start_validation(total, desc=stage.capitalize())

    def progress_advance_eval(self) -> None:
        if self._progress is not None:
            self._progress.advance_validation()

    def progress_end_eval(self) -> None:
        self.trainer._metrics.evaluating = False
        if self._progress is not None:
            self._progress.end_validation()

    # ------------------------------------------------------------------- checkpoints
    def save(self, path: str | Path, *, allow_partial: bool = False, weights_only: bool = False) -> Path:
        """Write a checkpoint; refuse (RuntimeError) inside a window unless `allow_partial`."""
        target = Path(path)
        if self._logger is not None and not weights_only:
            self._logger.flush()  # what was logged up to this step is on disk before the checkpoint that resumes after it
        if weights_only:
            state = ckpt.collect_weights(self.trainer, target)
        else:
            state = ckpt.collect_state(self.trainer, allow_partial=allow_partial, target=target)
        failure: Exception | None = None
        sharded = self.trainer.strategy.sharded_checkpoints  # FSDP: every rank writes its shards
        if self.writes or sharded:
            try:
                if sharded:
                    save_sharded(state, target, self.trainer)
                else:
                    ckpt.save_atomic(state, target)
                self.saves += int(self.writes)
            except Exception as error:  # noqa: BLE001 - re-raised below, after the other ranks know
                failure = error
        # Also the barrier: no rank goes on before the file is complete, and a failed write
        # on rank 0 fails every rank instead of leaving them waiting in a later collective.
        written = self.trainer.strategy.all_agree(failure is None)
        if failure is not None:
            raise failure
        if not written:
            raise RuntimeError(f"Checkpoint {str(target)!r} could not be written on rank 0 (see its error).")
        return target

    def save_last(self) -> None:
        """last.ckpt; on an interrupt inside a window it is written and marked as not exact."""
        if self.trainer.args.enable_checkpointing and self.trainer._module is not None:
            self.save(self.last_path, allow_partial=True)

    def read_checkpoint(self, ckpt_path: str | Path, *, weights_only: bool = False) -> dict[str, Any]:
        """Load and check `ckpt_path` ('last', 'best' or a path) before anything is touched."""
        state = self._read(ckpt_path)
        ckpt.check_layout(state, weights_only=weights_only)
        return state

    def _read(self, ckpt_path: str | Path) -> dict[str, Any]:
        if str(ckpt_path) == "best":
            ckpt_path = self._best_path()
        if str(ckpt_path) == "last":
            found = ckpt.find_last(self.trainer.args.root_dir)
            if found is None:
                raise ckpt.CheckpointError(
                    f"ckpt_path='last': no last.ckpt under root_dir {str(self.trainer.args.root_dir)!r}. "
                    "Expected a previous run with enable_checkpointing=True in the same root_dir, or pass "
                    "the checkpoint's path."
                )
            ckpt_path = found
        if is_sharded(ckpt_path):
            return read_sharded(ckpt_path)
        return ckpt.load_checkpoint(ckpt_path)

    def _best_path(self) -> Path:
        """ckpt_path="best": the best file of the Trainer's ModelCheckpoint (Lightning's rule)."""
        for callback in self.trainer.callbacks:
            best = getattr(callback, "best_model_path", None)
            if best:
                return Path(best)
        raise ckpt.CheckpointError(
            "ckpt_path='best': no ModelCheckpoint of this Trainer has saved a best checkpoint yet. Expected "
            "callbacks=[ModelCheckpoint(monitor=...)] and a fit that saved one, or pass 'last' or a path."
        )

    def restore(self, checkpoint: dict[str, Any]) -> None:
        ckpt.restore_state(self.trainer, checkpoint)
        state = self.trainer.state
        self._resumed_inside_epoch = checkpoint if state.batches_done > 0 else None
        log.info(
            "Resumed from %s: epoch %d, optimizer step %d, batch %d of the epoch.",
            checkpoint.get("_path", "the checkpoint"), state.epoch, state.global_step, state.batches_done,
        )

    def take_resumed_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint of a resume inside an epoch, once (then it is let go): the loop
        applies it again after that epoch's start hooks (`trainer/loops/resume.py`)."""
        checkpoint, self._resumed_inside_epoch = self._resumed_inside_epoch, None
        return checkpoint

    def forget_resume(self) -> None:
        """Fit ended: a checkpoint kept for `take_resumed_checkpoint` is no longer needed."""
        self._resumed_inside_epoch = None

    def restore_weights(self, checkpoint: dict[str, Any]) -> None:
        path = checkpoint.get("_path")
        source = f"Checkpoint {path!r}" if path else "The checkpoint"
        ckpt.restore_module(self.trainer._module, checkpoint, source, self.trainer.strategy)
