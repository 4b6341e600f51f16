"""What the non-finite loss guard leaves behind: the windows it skipped, and its rollback.

The guard itself runs at each optimizer step's end (`automatic.py`): under DDP/FSDP the
window's loss is checked on every rank and the flags are all-reduced, so every rank takes the
same decision from the one host read fp32/bf16 make per step. What it decides:

- `nonfinite_loss="skip"`: the step is skipped on every rank, and its window (epoch, first and
  last micro-batch) is recorded in `LoopState.skipped_windows`, which every checkpoint holds.
  A run resumed from a checkpoint that lists a window it has not trained yet skips that window
  again without running it: the batches are read from the loader (the data order stays the
  uninterrupted run's) but never reach `training_step`.
- `nonfinite_loss="rollback"`: the window is recorded the same way, then the run goes back to
  the newest complete checkpoint it wrote (or resumed from), as a resume inside the process
  would, with the learning rates multiplied by `nonfinite_lr_backoff` (cumulative over
  rollbacks, and kept in the checkpoints written afterwards). The replay skips the recorded
  window, so the run always makes progress. Before the fit's first checkpoint there is nothing
  to go back to: the step is skipped instead, with a warning.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from trainer.loops.context import RunContext

__all__ = ["LossSpikes", "RollBack", "apply_lr_backoff", "nonfinite_window", "recorded_skips", "roll_back", "skip_recorded"]

log = logging.getLogger("trainer")


class LossSpikes:
    """`loss_spike_factor`: a window loss above `factor` times the mean of the finite window
    losses before it counts as non-finite. The mean is kept on the device (a running mean over
    the first `WARMUP` steps, then an exponential one), so the check adds no host read: the
    guard's one read checks the loss, replaced by nan where it spikes. It holds from the
    `WARMUP`-th step on; the mean is in `LoopState` (and so in checkpoints). Each rank checks
    its own loss against the mean of all ranks' losses."""

    WARMUP = 20
    DECAY = 0.98

    def __init__(self, context: RunContext, factor: float) -> None:
        self.state, self.factor = context.state, factor
        self.strategy = context.strategy

    def checked(self, loss: torch.Tensor) -> torch.Tensor:
        """What the guard checks for finiteness: `loss`, or nan where it spikes."""
        mean = self.state.loss_mean
        if mean is None or self.state.loss_count < self.WARMUP:
            return loss
        if mean.device != loss.device:  # read from a checkpoint
            mean = self.state.loss_mean = mean.to(loss.device)
        return torch.where(loss.float() > self.factor * mean, torch.full_like(mean, float("nan")), loss.float())

    def accept(self, loss: torch.Tensor) -> None:
        """A window that stepped: its loss joins the mean (on the device). Under DDP/FSDP the
        mean is of every rank's loss (one all-reduce of a scalar, no host read), so every rank
        holds the same mean and a checkpoint's (rank 0's) is every rank's."""
        state = self.state
        value = loss.detach().float()
        world = self.strategy.world_size
        if world > 1:  # every rank steps (and so accepts) the same windows: the guard agreed
            value = self.strategy.sum_over_ranks(value) / world
        state.loss_count += 1
        if state.loss_mean is None:
            state.loss_mean = value.clone()
            return
        mean = state.loss_mean.to(value.device)  # a no-op but after a checkpoint's read
        weight = 1.0 / state.loss_count if state.loss_count <= self.WARMUP else 1.0 - self.DECAY
        state.loss_mean = mean + (value - mean) * weight


class RollBack(Exception):
    """Raised at the end of a non-finite window under `nonfinite_loss="rollback"`; the fit
    loop catches it between epochs' batches and calls `roll_back`."""

    def __init__(self, where: str, windows: list[tuple[int, int, int]], backoff: float) -> None:
        super().__init__(where)
        self.where, self.windows, self.backoff = where, windows, backoff


def nonfinite_window(context: RunContext, batches_done: int) -> None:
    """The window ending before micro-batch `batches_done` had a non-finite loss on some rank
    (every rank calls this alike; the gradients are already cleared): raise, skip it, or roll
    back, as `nonfinite_loss` says."""
    state, mode = context.state, context.args.nonfinite_loss
    where = f"optimizer step {state.global_step + 1} (epoch {state.epoch}, batches {state.batches_done}..{batches_done - 1})"
    spike = context.args.loss_spike_factor
    what = "a non-finite loss (nan or inf)" if spike is None else f"a non-finite loss (nan or inf) or one above {spike:g} times the running mean"
    if mode == "error":
        raise FloatingPointError(
            f"training_step returned {what} on some rank at {where}; the weights were "
            "not updated. Expected finite losses: lower the learning rate, check the data, or "
            "pass Trainer(nonfinite_loss='skip') to skip such steps."
        )
    window = (state.epoch, state.batches_done, batches_done)
    if window not in state.skipped_windows:
        state.skipped_windows.append(window)  # a resume or rollback that replays it skips it
    if mode == "rollback" and context.checkpoints.rollback_targets:
        raise RollBack(where, list(state.skipped_windows), state.lr_backoff)
    log.warning("Skipped %s: non-finite loss (nonfinite_loss=%r%s).", where, mode,
                ": no checkpoint of this fit to roll back to yet" if mode == "rollback" else "")
    state.global_step += 1
    state.skipped_steps += 1
    state.batches_done = batches_done


def recorded_skips(context: RunContext) -> dict[int, int]:
    """The epoch's recorded windows still ahead of the loop: {first micro-batch: end}."""
    state = context.state
    return {first: end for epoch, first, end in state.skipped_windows if epoch == state.epoch and end > state.batches_done}


def skip_recorded(context: RunContext, batch: Any, batch_idx: int, last: bool) -> None:
    """A micro-batch of a recorded window: read from the loader, never trained on; the
    window's end counts a skipped optimizer step, as the guard's skip did."""
    context.output.progress_advance(batch)
    if not last:
        return
    state = context.state
    log.warning("Skipped optimizer step %d (epoch %d, batches %d..%d): the non-finite loss guard skipped this window "
                "before (recorded in the checkpoint), so it is skipped again.", state.global_step + 1, state.epoch,
                state.batches_done, batch_idx)
    state.global_step += 1
    state.skipped_steps += 1
    state.batches_done = batch_idx + 1


def roll_back(context: RunContext, rollback: RollBack) -> None:
    """Restore the newest checkpoint this run wrote or resumed from, keep the recorded
    windows, and scale the learning rates by the backoff (relative to the checkpoint's)."""
    checkpoint = context.checkpoints.read_newest_for_rollback()
    state = context.state
    if checkpoint is None:
        raise FloatingPointError(
            f"training_step returned a non-finite loss (nan or inf) at {rollback.where}, and none of the checkpoints "
            "this fit wrote could be read to roll back to (see the warnings above). Expected a readable checkpoint "
            "of the run: check the run's folder, or pass Trainer(nonfinite_loss='skip')."
        )
    context.checkpoints.restore({k: v for k, v in checkpoint.items() if k != "loggers"})
    restored_backoff = state.lr_backoff
    for window in rollback.windows:
        if window not in state.skipped_windows:
            state.skipped_windows.append(window)
    new_backoff = rollback.backoff * context.args.nonfinite_lr_backoff
    apply_lr_backoff(context, new_backoff / restored_backoff)
    state.lr_backoff = new_backoff
    log.warning(
        "Non-finite loss at %s: rolled back to %s (optimizer step %d, epoch %d, batch %d of the epoch); the "
        "window is skipped from now on and the learning rates are %g times their scheduled values "
        "(nonfinite_loss='rollback', nonfinite_lr_backoff=%g).", rollback.where, checkpoint.get("_path", "a checkpoint"),
        state.global_step, state.epoch, state.batches_done, new_backoff, context.args.nonfinite_lr_backoff,
    )


def apply_lr_backoff(context: RunContext, factor: float, optimizers: bool = True, schedulers: bool = True) -> None:
    """Multiply every optimizer's learning rates, and its schedulers' base rates (which the
    schedulers compute the rates from), by `factor` (a scheduler's `get_last_lr()` shows the
    new rates from its next step on)."""
    setup = context.optimizers
    if factor == 1.0 or setup is None:
        return
    for optimizer in setup.optimizers if optimizers else []:
        for group in optimizer.param_groups:
            for key in ("lr", "initial_lr"):
                if key in group:
                    value = group[key]
                    if hasattr(value, "mul_"):
                        value.mul_(factor)
                    else:
                        group[key] = value * factor
    for config in setup.schedulers if schedulers else []:
        scheduler: Any = config.scheduler
        if hasattr(scheduler, "base_lrs"):
            scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
