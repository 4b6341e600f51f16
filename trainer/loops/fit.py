"""The fit loop: epochs, and the batches of one epoch.

    on_train_start
    while not finished:
        on_train_epoch_start                      (also when a run resumes inside an epoch)
        for each micro-batch (windows of accumulate_grad_batches):
            on_train_batch_start
            optimization.run(batch)               automatic.py or manual.py
            on_train_batch_end                    after the step a window's last batch completes
            stop after a step at max_steps or on request
        validation (on_validation_start ... on_validation_end)
        on_train_epoch_end                        the module's, then the callbacks'
        epoch-interval schedulers; last.ckpt
    on_train_end

What one step does lives in the optimization object; this file only says when.
"""

from __future__ import annotations

import logging
from typing import Any

from trainer._utils import length_of, move_to_device
from trainer.loops.automatic import AutomaticOptimization
from trainer.loops.batches import empty_loader_message, micro_batches
from trainer.loops.manual import ManualOptimization

__all__ = ["FitLoop"]

log = logging.getLogger("trainer")


class FitLoop:
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        module = trainer._module
        self.optimization: AutomaticOptimization | ManualOptimization = (
            AutomaticOptimization(trainer) if module.automatic_optimization else trainer._manual
        )
        wants = trainer._dispatch.wants
        self.want_batch_start = wants("on_train_batch_start")
        self.want_batch_end = wants("on_train_batch_end")

    # ------------------------------------------------------------------------ epochs
    def finished(self) -> bool:
        args, state = self.trainer.args, self.trainer.state
        if args.max_steps is not None and state.global_step >= args.max_steps:
            return True
        max_epochs = args.max_epochs if args.max_epochs is not None else (None if args.max_steps else 1)
        return max_epochs is not None and state.epoch >= max_epochs

    def run(self, train_loader: Any, val_loader: Any) -> None:
        trainer = self.trainer
        if self.finished():
            log.warning(  # a warning, so a notebook (no logging configured) shows it
                "Nothing to train: the run already reached max_epochs=%s / max_steps=%s. To train further, "
                "create a Trainer with higher limits and call its fit with ckpt_path=%s.",
                trainer.args.max_epochs, trainer.args.max_steps,
                repr(str(trainer._io.last_path)) if trainer.args.enable_checkpointing else "<a trainer.save_checkpoint(path) file>",
            )
        trainer._call("on_train_start")
        while not self.finished() and not trainer.state.stop_requested:
            steps_before = trainer.state.global_step
            if not self.train_epoch(train_loader):
                break
            self._check_progress(steps_before)
            self.end_epoch(val_loader)
        trainer._io.save_last()
        trainer._call("on_train_end")

    def end_epoch(self, val_loader: Any) -> None:
        trainer, state = self.trainer, self.trainer.state
        trainer._io.close_train_epoch()
        if val_loader is not None:
            trainer._eval.run(val_loader, "validation")
        trainer._call("on_train_epoch_end")
        opt = trainer._opt
        if opt.schedulers and trainer._module.automatic_optimization:
            opt.step_schedulers("epoch", state.epoch + 1, trainer._read_metric)
        state.epoch += 1
        state.batches_done = 0
        with trainer._bookkeeping():
            trainer._io.end_epoch()
        trainer._agree_stop()

    def _check_progress(self, steps_before: int) -> None:
        """An epoch without a single optimizer step: never loop forever on max_steps."""
        trainer = self.trainer
        if trainer.state.global_step != steps_before or trainer.args.max_steps is None:
            return
        manual = not trainer._module.automatic_optimization
        hint = (
            "call opt.step() on an optimizer from self.optimizers() in training_step"
            if manual
            else "return the loss from training_step (None skips a batch); to step optimizers yourself, "
            "set self.automatic_optimization = False"
        )
        raise RuntimeError(
            f"Epoch {trainer.state.epoch} ended without a single optimizer step, so max_steps="
            f"{trainer.args.max_steps} would never be reached. Expected at least one step per epoch: {hint}."
        )

    # ------------------------------------------------------------------- one epoch
    def train_epoch(self, loader: Any) -> bool:
        """Run (the rest of) one epoch; return whether it reached its end."""
        trainer = self.trainer
        trainer._in_train_batches = True
        try:
            return self._train_batches(loader)
        finally:
            trainer._in_train_batches = False

    def _train_batches(self, loader: Any) -> bool:
        trainer = self.trainer
        state, args, strategy = trainer.state, trainer.args, trainer.strategy
        trainer._module.train()
        strategy.set_epoch(loader, state.epoch)
        total = length_of(loader)
        if total == 0:
            raise ValueError(empty_loader_message(loader))
        trainer._call("on_train_epoch_start")  # also on a resume inside the epoch
        iterator = trainer._io.epoch_iterator(loader, state.batches_done)
        with trainer._bookkeeping():
            trainer._io.progress_start_epoch(total)
        device, optimization = strategy.device, self.optimization
        want_start, want_end = self.want_batch_start, self.want_batch_end
        k = args.accumulate_grad_batches if args.accumulate_grad_batches else 1
        optimization.reset()
        batch_idx = state.batches_done - 1
        for batch_idx, size, last, batch in micro_batches(iterator, total, k, state.batches_done):
            batch = move_to_device(batch, device)
            if want_start:
                trainer._call("on_train_batch_start", batch, batch_idx)
            output = optimization.run(batch, batch_idx, size, last)  # advances the bar before a step logs
            if want_end:
                trainer._call("on_train_batch_end", output, batch, batch_idx)
            if last:
                if args.max_steps is not None and state.global_step >= args.max_steps:
                    state.stop_requested = True
                elif state.global_step % args.log_every_n_steps == 0:
                    trainer._agree_stop()  # DDP: no per-step collective, only at logging steps
                if state.stop_requested:
                    return total is not None and state.batches_done >= total
        if batch_idx + 1 > state.batches_done:  # the loader ended inside a window (len() overstated it)
            optimization.end_window(batch_idx + 1)
        if total is None and state.epoch == 0 and state.batches_done == 0:
            raise ValueError(empty_loader_message(loader))
        return True

