"""`RunOutput`: what a run writes and shows: its folder, loggers, step scalars and progress bar.

- the run folder: `run_dir` (named, SLURM's, a logger's, the folder of the run a resume
  continues, or a new `version_N`: `runs.py`), with the loggers, in `output_folder.py`;
- the loggers (`logger=True`: TensorBoard; a logger; `logger=[...]`), opened once per run with
  the hyperparameters, and the summary line and model summary (`summary.py`);
- the scalars of logging steps (loss, gradient norm, learning rates, throughput) and of epochs
  (what `self.log` reduced), with `trainer.logged_metrics` and `history`;
- the progress bar (tqdm, a progress-bar callback's, or plain lines when not in a terminal).

The loop calls these few methods and knows nothing of TensorBoard, tqdm or files. Only the
global-zero rank writes anything. The run's checkpoints are written in its folder by
`context.checkpoints` (`trainer/checkpoint/io.py`), which also says where a resumed run continues
(`continued_dir`) and at which step (`resumed_at`).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from trainer.logging.base import finish, lightning_style, log_hyperparams, write
from trainer.logging.metrics import batch_size_of, to_floats
from trainer.logging.multi import LoggerList
from trainer.logging.host import RunHost
from trainer.logging.output_folder import OutputFolder
from trainer.logging.progress import ProgressBar
from trainer.logging.live import LineProgress, LiveNumbers, fresh_values, line_settings, ordered, run_progress, wants_lines
from trainer.logging.throughput import Throughput
from trainer.logging.summary import example_sizes, fit_summary, lightning_hyperparameters, run_hyperparameters, summarize
from trainer._utils import WeakAttribute
from trainer.module.transfer import batch_mover

__all__ = ["RunOutput", "RunHost"]

log = logging.getLogger("trainer")


class RunOutput(OutputFolder):
    context: WeakAttribute[RunHost] = WeakAttribute()  # the run's context owns this object: no reference cycle

    def __init__(self, context: RunHost) -> None:
        self.context = context
        args = context.args
        self._run_dir: Path | None = None
        # The folder of the run a resume continues (ckpt_path="last" of an unnamed run, a checkpoint
        # path inside root_dir): set by the run's checkpoints when they read it (trainer/checkpoint/io.py).
        self.continued_dir: Path | None = None
        self._logger: Any = None
        self._logger_arg = args.logger
        self._progress: Any = None  # a ProgressBar, or what a progress-bar callback makes
        self._hparams_logged = False
        self._last_log_time: float | None = None
        self._last_log_step = 0
        self._samples = 0  # samples seen since the last log (first tensor's dim 0 of each batch)
        self._samples_known = True
        self._summary_logged = False
        self._in_fit = False
        self._epoch_record: dict[str, float] = {}
        # The training epoch's means, written as one row once the epoch's end hooks ran (after
        # its validation, as Lightning writes them), with the epoch they belong to.
        self._epoch_row: dict[str, float] = {}
        self._epoch_row_epoch = 0
        self._last_step_epoch = 0  # the epoch of the step `log_last_step` may write
        self.history: list[dict[str, float]] = []
        self.logged: dict[str, float] = {}  # trainer.logged_metrics
        self.train_loss: float | None = None  # the loss of the last logging step (the learning-rate finder reads it)
        self.shown: dict[str, float] = {}  # trainer.progress_bar_metrics
        self._live = LiveNumbers()  # the bar's numbers between logging steps (logging/live.py)
        self._last_loss: torch.Tensor | None = None  # the last step's loss, until it is written
        self._step_unwritten = False  # a step ran since the last write (log_last_step writes it)
        self._logged_step = -1
        self.throughput = Throughput(args.performance_metrics)  # items/s, FLOP/s, MFU, peak memory

    # ------------------------------------------------------------------- run state
    @property
    def in_fit(self) -> bool:
        """Between `start_run` and `end_run`: inside fit."""
        return self._in_fit

    # --------------------------------------------------------------------- lifecycle
    def run_start_actions(self) -> None:
        """What the YAML layer asked to do once a run really starts (write config.yaml)."""
        actions, self.context.at_run_start = list(self.context.at_run_start), []
        for action in actions:
            action()

    def start_run(self, module: Any) -> None:
        """Open the progress bar; once per run: the summary line and the hyperparameters.
        (The run's checkpoints checked its folder before: `Checkpoints.start_run`.)"""
        args = self.context.args
        self.run_start_actions()
        self._in_fit = True
        self._epoch_record = {}
        self.context.metrics.clock = lambda: self.context.state.global_step  # per-step values: one per optimizer step
        strategy = self.context.strategy
        if strategy.world_size > 1 and (args.logger is not False or args.enable_checkpointing):
            # Every rank uses rank 0's folder (for last.ckpt paths); only rank 0 creates it.
            self._run_dir = Path(strategy.broadcast_object(str(self.run_dir) if self.writes else None))
        default_summary = args.enable_model_summary and not any(
            any(c.__name__ == "ModelSummary" for c in type(cb).__mro__) for cb in self.context.callbacks
        )
        # Every rank, every fit: Lightning's summary runs `example_input_array` through the module
        # (for the in/out sizes), which moves the random streams of a forward that draws.
        sizes = example_sizes(module, strategy.device, self.context.precision.autocast(),
                              self._example_mover(module)) if default_summary else None
        if self.writes and not self._summary_logged:
            log.info("%s", fit_summary(self.context, module))
            if default_summary:  # Lightning's default ModelSummary(max_depth=1), unless a ModelSummary callback prints its own
                log.info("\n%s", summarize(module, max_depth=1, sizes=sizes))
            self._summary_logged = True
        if self.writes and args.enable_progress_bar:
            self._progress = self._new_bar()
        logger = self.logger
        # a logger written the Lightning way gets the module's hyperparameters at every fit, as from Lightning
        autolog = args.enable_autolog_hparams  # False: the module logs what it wants itself
        theirs = self._lightning_hyperparameters(module) if autolog else None
        if autolog and logger is not None and not self._hparams_logged:
            ours = run_hyperparameters(module, args, self.context.precision, self.context.experiment_config)
            if isinstance(logger, LoggerList):
                logger.log_hyperparams(ours, lightning_params=theirs)
            else:
                log_hyperparams(logger, ours, theirs)
            self._hparams_logged = True
        elif theirs is not None:
            for each in self.loggers:
                if lightning_style(each):
                    log_hyperparams(each, {}, theirs)
        self.log_graph(module)
        self._last_log_time = time.perf_counter()
        self._last_log_step = self.context.state.global_step
        self._samples, self._samples_known = 0, True

    def log_graph(self, module: Any) -> None:
        """Each logger's `log_graph(module)` (TensorBoardLogger(log_graph=True) traces the module on
        its `example_input_array`), when fit, validate, test or predict starts, as Lightning does:
        the trace runs the forward, so a forward that draws random numbers draws them here too."""
        if not self.context.args.enable_autolog_hparams:
            return  # as Lightning: neither the hyperparameters nor the graph when a run starts
        if self._logger is None and self._logger_arg is True:
            return  # the default logger, not made yet, has log_graph off (a URL root_dir: no listing for nothing)
        theirs = None if self._in_fit else self._lightning_hyperparameters(module)
        if theirs is not None:  # validate/test/predict: a logger written the Lightning way gets the hyperparameters again
            for each in self.loggers:
                if lightning_style(each):
                    log_hyperparams(each, {}, theirs)
        for each in self.loggers:
            if not callable(getattr(each, "log_graph", None)):
                continue
            example = getattr(module, "example_input_array", None)
            move = self._example_mover(module) if getattr(each, "log_graph_on_start", False) and example is not None else None
            if move is not None:  # the example goes through the batch transfer hooks first, as in Lightning
                each.log_graph(module, move(example))
            else:
                each.log_graph(module)

    def _example_mover(self, module: Any) -> Any:
        """The module's (or DataModule's) batch transfer hooks for `example_input_array`, or None
        (their warnings were given when the loop composed them)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return batch_mover(module, self.context.datamodule, self.context.strategy.device)

    def _lightning_hyperparameters(self, module: Any) -> dict[str, Any] | None:
        """What Lightning gives a logger of one's own (`lightning_hyperparameters`); None, and
        nothing read, when no logger is written the Lightning way."""
        if not any(lightning_style(each) for each in self.loggers):
            return None
        return lightning_hyperparameters(module, getattr(self.context, "datamodule", None))

    def end_run(self, failed: bool = False) -> None:
        """Close the bars and the logger; runs in `fit`'s finally, so also after an error
        (`failed`; then the run's checkpoints complete a write in flight: `Checkpoints.end_run`)."""
        self._in_fit = False
        try:
            self._write_epoch_row()  # an epoch's end that failed after its means were taken
            if self._progress is not None:
                self._progress.close()
        finally:
            self._progress = None
            if self._logger is not None:
                self._finish(failed)

    def _finish(self, failed: bool) -> None:
        """The logger's end of a run: `finalize(status)` for one written the Lightning way, else flush and close."""
        if isinstance(self._logger, LoggerList):
            self._logger.finish(failed)
        else:
            finish(self._logger, failed)

    def end_epoch(self) -> None:
        """After a finished epoch: one `history` row, flush the event file (the loop then writes last.ckpt)."""
        self.close_train_epoch()  # what epoch-end hooks logged with on_epoch=True: this epoch's, not the next's
        self._write_epoch_row()
        self.context.metrics.end_train_epoch()  # metric objects logged in training are reset, as Lightning does
        if self._in_fit:
            row = {"epoch": float(self.context.state.epoch - 1), "step": float(self.context.state.global_step)}
            row.update(self._epoch_record)
            self.history.append(row)
            self._epoch_record = {}
        if self._logger is not None:
            self._logger.flush()

    # ---------------------------------------------------------------------- logging
    def log_step(self, window_loss: torch.Tensor | None, grad_norm: torch.Tensor | None, epoch: int | None = None,
                 late: bool = False) -> None:
        """Write a logging step's scalars. `late`: written after the step (at the end of fit,
        after the epoch's validation): the names the user logged keep, in `callback_metrics` and
        `logged_metrics`, what was logged under them since (a validation's value of the same
        name), as in Lightning, which never writes that step; the logger still gets the step."""
        context = self.context
        values: dict[str, Any] = {"train/loss": window_loss} if window_loss is not None else {}
        if grad_norm is not None:
            values["train/grad_norm"] = grad_norm
        scale = context.precision.loss_scale()
        if scale is not None:
            values["train/loss_scale"] = scale
        own = list(values)
        users = context.metrics.take_step_values()
        values.update(users)  # a name the user logged: the user's value
        floats = to_floats(values)  # the one host read of this logging interval
        self.train_loss = floats.get("train/loss")  # the step's loss (the user's, if logged per step under this name)
        automatic: dict[str, float] = {}
        if scale is not None or context.args.nonfinite_loss == "skip":
            automatic["train/skipped_steps"] = float(context.state.skipped_steps)
        for k, optimizer in enumerate(context.optimizers.optimizers if context.optimizers is not None else []):  # optimizer k > 0 (manual optimization): lr-optK-groupN
            for i, group in enumerate(optimizer.param_groups):
                lr = group["lr"]
                automatic[f"train/lr-{f'opt{k}-' if k else ''}group{i}"] = float(lr.item() if isinstance(lr, torch.Tensor) else lr)
        now = time.perf_counter()
        if self._last_log_time is not None and now > self._last_log_time:
            elapsed = now - self._last_log_time
            automatic["train/steps_per_sec"] = (context.state.global_step - self._last_log_step) / elapsed
            if self._samples_known and self._samples:
                automatic["train/samples_per_sec"] = self._samples / elapsed
            micro_batches = (context.state.global_step - self._last_log_step) * context.args.accumulate_grad_batches
            automatic.update(self.throughput.scalars(elapsed, self._samples if self._samples_known else None, micro_batches,
                                                     context.strategy.device, context.precision.name))
        floats = {**automatic, **floats}
        shown = {"loss": floats["train/loss"]} if "train/loss" in floats else {}
        # a name the user logs is the user's alone (noted once where the user's value does not simply replace ours)
        taken = context.metrics.leave_to_user([name for name in own + list(automatic) if name not in users])
        floats = {k: v for k, v in floats.items() if k in users or k not in taken} if taken else floats
        self._last_log_time, self._last_log_step = now, context.state.global_step
        self._samples, self._samples_known = 0, True
        reported = {k: v for k, v in floats.items() if k not in users} if late else floats
        context.metrics.update_latest(reported)
        self.logged.update(reported)
        self._last_loss, self._logged_step, self._step_unwritten = None, context.state.global_step, False
        if self.logger is not None:  # with `epoch` (an int), as Lightning writes it beside every logged value
            write(self.logger, {**floats, "epoch": context.state.epoch if epoch is None else epoch},
                  step=context.state.global_step)
        shown.update({k: floats[k] for k in context.metrics.prog_bar if k in floats and k != "train/loss"})
        self.shown.update(shown)
        if self._progress is not None:
            self._progress.set_postfix(ordered(self.shown))

    def step_done(self, window_loss: torch.Tensor | None, epoch: int, step: int) -> None:
        """After the optimizer step `step` of `epoch` that wrote nothing: kept for `log_last_step`;
        the bar's loss refreshed every 0.5 s (logging/live.py)."""
        self._last_loss, self._step_unwritten, self._last_step_epoch = window_loss, True, epoch
        if self._progress is not None:
            self._live.step(self._progress, self.shown, window_loss, step, self._fresh_values)

    def note_pending(self) -> None:
        """Put the per-step values logged since the last write in `logged_metrics` (Lightning
        takes every step's values there, written or not): one host read, before an epoch-level
        write or the last step's, never per step."""
        pending = self.context.metrics.pending_step_values()
        if pending:
            self.logged.update(to_floats(pending))
            self.context.metrics.mark_pending_seen()

    def log_last_step(self) -> None:
        """Fit ends between logging steps: the last step's training scalars are written too
        (also when it returned no loss: what it logged, and the learning rates)."""
        if self._step_unwritten and self.context.state.global_step > self._logged_step:
            self.note_pending()  # the step's values are logged_metrics' unless something wrote the name since
            self.log_step(self._last_loss, None, epoch=self._last_step_epoch, late=True)  # the epoch the step was in

    def close_train_epoch(self) -> None:
        """Reduce what training_step logged with on_epoch=True and write it."""
        values = self.context.metrics.close_epoch(self.context.strategy.reduce_epoch)
        if values:
            if not self._epoch_row:
                self._epoch_row_epoch = self.context.state.epoch
            self.log_eval(to_floats(values), training_epoch=True)

    def _write_epoch_row(self) -> None:
        """The training epoch's means as one row, at the step the epoch ended on."""
        row, self._epoch_row = self._epoch_row, {}
        if row and self.logger is not None:
            step = self.context.state.global_step
            if step == self.context.checkpoints.resumed_at:  # a resumed run: a point the tracker already holds is not written twice
                self._log_once_at(step, {**row, "epoch": self._epoch_row_epoch})
            else:
                write(self.logger, {**row, "epoch": self._epoch_row_epoch}, step)

    def log_eval(self, results: dict[str, float], training_epoch: bool = False) -> None:
        """Write epoch-level results at `global_step`; inside fit they join the epoch's `history` row.
        A training epoch's means (`training_epoch`) are written once its end hooks ran."""
        if self._in_fit:
            self._epoch_record.update(results)
        hidden = self.context.metrics.hidden
        written = {k: v for k, v in results.items() if k not in hidden and k.removesuffix("_epoch") not in hidden}
        self.note_pending()  # the steps before this write come first in logged_metrics, as in Lightning
        self.logged.update(written)
        on_bar = {k: v for k, v in results.items() if k in self.context.metrics.prog_bar}
        if on_bar and self._in_fit and not self.context.sanity_checking:
            self.shown.update(on_bar)  # the epoch's bar, kept on screen, shows its validation metrics
            if self._progress is not None:
                self._progress.set_postfix(ordered(self.shown))
        if training_epoch and self._in_fit:
            self._epoch_row.update(written)
        elif self.logger is not None and written and self.context.module is not None:
            step = self.context.state.global_step
            if self._in_fit and step == self.context.checkpoints.resumed_at:
                self._log_once_at(step, {**written, "epoch": self.context.state.epoch})
            else:
                write(self.logger, {**written, "epoch": self.context.state.epoch}, step)
            if not self._in_fit:  # standalone validate/test: leave no writer open
                self._finish(False)

    def _log_once_at(self, step: int, values: dict[str, float]) -> None:
        """Epoch-level values at the step a run resumed at (a validation the checkpoint was cut
        before, run again): a tracker that already holds one of them (the run it continues got
        past that point before it stopped) is not given it twice. Each tracker that can
        say what it holds (`written_at`: TensorBoard, MLflow, CSV) is asked."""
        for logger in self.loggers:
            held = getattr(logger, "written_at", None)
            known = held(step, [k for k in values if k != "epoch"]) if callable(held) else set()
            fresh = {k: v for k, v in values.items() if k not in known}
            if set(fresh) - {"epoch"}:
                write(logger, fresh, step)

    def forget_shown(self) -> None:
        """A new fit/validate/test/predict: `logged_metrics` and `progress_bar_metrics` start
        empty, as Lightning's (the earlier run's values are not this run's)."""
        self.logged, self.shown = {}, {}

    # --------------------------------------------------------------------- progress
    def progress_start_epoch(self, total: int | None) -> None:
        self.shown = {}
        # Throughput is measured within an epoch: validation time never counts as training.
        self._last_log_time, self._last_log_step = time.perf_counter(), self.context.state.global_step
        self._samples, self._samples_known = 0, True
        self._live.reset()  # the new bar shows the loss after its first step
        self.throughput.reset()
        if self._progress is not None:
            self._progress.start_train_epoch(self.context.state.epoch, total)
            done = self.context.state.batches_done
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
            if self._counts_samples:
                self._progress.count_samples(batch)

    def progress_start_eval(self, stage: str, total: int | None) -> None:
        self.context.metrics.evaluating = True  # per-step values logged now stay out of train/
        if self.context.sanity_checking:
            return  # a few batches before training: no bar of their own (nothing to watch)
        if self._progress is None and self.writes and self.context.args.enable_progress_bar:
            self._progress = self._new_bar()
        if self._progress is not None:
            self._progress.start_validation(total, desc=stage.capitalize())

    def _new_bar(self) -> Any:
        """The bar of a progress-bar callback (callbacks.TQDMProgressBar/RichProgressBar), else tqdm's."""
        for callback in self.context.callbacks:
            make = getattr(callback, "make_progress_bar", None)
            if callable(make):
                return make()
        if wants_lines(self.context.args.progress_lines):  # not a terminal: lines (logging/live.py)
            lines = LineProgress(**line_settings(self.context.args.progress_lines))
            lines.status, lines.fresh = self._line_status, self._fresh_values
            return lines
        return ProgressBar()

    @property
    def progress_bar(self) -> Any:
        """The bar open now (tqdm's, a progress-bar callback's, or lines), else None."""
        return self._progress

    @property
    def _counts_samples(self) -> bool:
        return isinstance(self._progress, LineProgress)

    def _line_status(self) -> dict[str, Any]:
        context = self.context
        metrics = self.logged if context.state.batches_done == 0 else {}  # at an epoch's end: its values
        return {"step": context.state.global_step, "epoch": context.state.epoch, **self._run_progress(),
                "epoch_metrics": {k: v for k, v in metrics.items() if k.startswith("val")}}

    def _run_progress(self) -> dict[str, Any]:
        context = self.context
        return run_progress(context.args, context.state, context.state.global_step, getattr(context.trainer, "num_training_batches", math.inf),
                            context.module, lambda: getattr(context.trainer, "estimated_stepping_batches", None))

    def _fresh_values(self) -> dict[str, float]:
        return fresh_values(self.context.metrics, self._last_loss)

    def progress_advance_eval(self) -> None:
        if self._progress is not None:
            self._progress.advance_validation()

    def progress_end_eval(self) -> None:
        self.context.metrics.evaluating = False
        if self._progress is not None:
            self._progress.end_validation()
