"""A run's input and output: its folder, logger, progress bar, checkpoints and data order.

The loop calls these few methods and knows nothing of TensorBoard, tqdm or files.
Only the global-zero rank writes anything.
"""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any

import torch

from trainer import checkpoint as ckpt
from trainer._metrics import to_floats
from trainer._utils import rng_state, set_rng_state
from trainer.loggers import TensorBoardLogger, next_version_dir
from trainer.progress import ProgressBar

__all__ = ["RunIO"]

log = logging.getLogger("trainer")


class RunIO:
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        args = trainer.args
        self._run_dir: Path | None = None
        self._logger: Any = None
        self._logger_arg = args.logger
        self._progress: ProgressBar | None = None
        self._hparams_logged = False
        self.saves = 0
        self.terminated = False
        self.epoch_data_rng: torch.Tensor | None = None
        self._last_log_time: float | None = None
        self._last_log_step = 0

    # ------------------------------------------------------------------- run folder
    @property
    def writes(self) -> bool:
        return self.trainer.strategy.is_global_zero

    @property
    def logger(self) -> Any:
        if self._logger is None and self.writes and self._logger_arg is not False:
            if self._logger_arg is True:
                self._logger = TensorBoardLogger(self.trainer.args.root_dir)
            else:
                self._logger = self._logger_arg
        return self._logger

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
    def start_run(self, module: Any) -> None:
        args = self.trainer.args
        if self.writes and args.enable_progress_bar:
            self._progress = ProgressBar()
        logger = self.logger
        if logger is not None and not self._hparams_logged:
            params = {
                "module": dict(getattr(module, "hparams", {}) or {}),
                "trainer": {k: v for k, v in args.model_dump().items() if k not in ("callbacks", "logger")},
            }
            params["trainer"]["precision"] = getattr(self.trainer.precision, "name", str(args.precision))
            logger.log_hyperparams(params)
            self._hparams_logged = True
        self._last_log_time = time.perf_counter()
        self._last_log_step = self.trainer.global_step

    def end_run(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self._logger is not None:
            self._logger.flush()
            self._logger.close()

    def end_epoch(self) -> None:
        if self._logger is not None:
            self._logger.flush()
        self.save_last()

    # ---------------------------------------------------------------------- logging
    def log_step(self, window_loss: torch.Tensor, grad_norm: torch.Tensor | None) -> None:
        trainer = self.trainer
        values: dict[str, Any] = {"train/loss": window_loss}
        if grad_norm is not None:
            values["train/grad_norm"] = grad_norm
        scale = trainer.precision.loss_scale()
        if scale is not None:
            values["train/loss_scale"] = scale
        values.update(trainer._metrics.take_step_values())
        floats = to_floats(values)
        if trainer.optimizer is not None:
            for i, group in enumerate(trainer.optimizer.param_groups):
                floats[f"train/lr-group{i}"] = float(group["lr"])
        now = time.perf_counter()
        if self._last_log_time is not None and now > self._last_log_time:
            floats["train/steps_per_sec"] = (trainer.global_step - self._last_log_step) / (now - self._last_log_time)
        self._last_log_time, self._last_log_step = now, trainer.global_step
        if self.logger is not None:
            self.logger.log_metrics(floats, step=trainer.global_step)
        if self._progress is not None:
            shown = {"loss": floats["train/loss"]}
            shown.update({k: floats[k] for k in trainer._metrics.prog_bar if k in floats})
            self._progress.set_postfix(shown)

    def close_train_epoch(self) -> None:
        """Reduce what training_step logged with on_epoch=True and write it."""
        values = self.trainer._metrics.close_epoch()
        if values:
            self.log_eval(to_floats(self.trainer.strategy.reduce_mean(values, {})))

    def log_eval(self, results: dict[str, float]) -> None:
        if self.logger is not None and results and self.trainer._module is not None:
            self.logger.log_metrics(results, step=self.trainer.global_step)

    # --------------------------------------------------------------------- progress
    def progress_start_epoch(self, total: int | None) -> None:
        if self._progress is not None:
            self._progress.start_train_epoch(self.trainer.current_epoch, total)
            done = self.trainer.state.batches_done
            if done:
                self._progress.advance(done)

    def progress_advance(self) -> None:
        if self._progress is not None:
            self._progress.advance()

    def progress_start_eval(self, stage: str, total: int | None) -> None:
        if self._progress is None and self.writes and self.trainer.args.enable_progress_bar:
            self._progress = ProgressBar()
        if self._progress is not None:
            self._progress.start_validation(total)

    def progress_advance_eval(self) -> None:
        if self._progress is not None:
            self._progress.advance_validation()

    def progress_end_eval(self) -> None:
        if self._progress is not None:
            self._progress.end_validation()

    # ------------------------------------------------------------------- checkpoints
    def save(self, path: str | Path) -> Path:
        target = Path(path)
        state = ckpt.collect_state(self.trainer)
        if self.writes:
            ckpt.save_atomic(state, target)
            self.saves += 1
        self.trainer.strategy.barrier()
        return target

    def save_last(self) -> None:
        if self.trainer.args.enable_checkpointing and self.trainer._module is not None:
            self.save(self.last_path)

    def read_checkpoint(self, ckpt_path: str | Path) -> dict[str, Any]:
        if str(ckpt_path) == "last":
            found = ckpt.find_last(self.trainer.args.root_dir)
            if found is None:
                raise ckpt.CheckpointError(
                    f"ckpt_path='last': no last.ckpt under root_dir {str(self.trainer.args.root_dir)!r}. "
                    "Expected a previous run with enable_checkpointing=True in the same root_dir, or pass "
                    "the checkpoint's path."
                )
            ckpt_path = found
        return ckpt.load_checkpoint(ckpt_path)

    def restore(self, checkpoint: dict[str, Any]) -> None:
        ckpt.restore_state(self.trainer, checkpoint)

    def restore_weights(self, checkpoint: dict[str, Any]) -> None:
        ckpt.restore_module(self.trainer._module, checkpoint, source="checkpoint")

    # -------------------------------------------------------------------- data order
    def epoch_iterator(self, loader: Any, skip: int) -> Any:
        """An iterator over this epoch's batches, positioned after `skip` consumed ones.

        The torch RNG state at the start of each epoch is kept (it decides the shuffle
        order); resuming mid-epoch replays it, skips what was consumed, and restores the
        RNG state the checkpoint was taken with.
        """
        if skip == 0 or self.epoch_data_rng is None:
            self.epoch_data_rng = torch.get_rng_state()
            return iter(loader)
        current = rng_state()
        torch.set_rng_state(self.epoch_data_rng)
        iterator = iter(loader)
        for _ in itertools.islice(iterator, skip):
            pass
        set_rng_state(current)
        return iterator
