"""Where the loop is: one state object, checkpointed as is, read by user code through the Trainer."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

__all__ = ["LoopState"]


@dataclasses.dataclass
class LoopState:
    """Where the loop is. Checkpointed as is; user code reads it through the Trainer.

    `batches_done` counts the micro-batches of the current epoch that belong to
    completed optimizer steps, so a checkpoint is always a cut at a step boundary.
    """

    epoch: int = 0
    global_step: int = 0
    batches_done: int = 0
    skipped_steps: int = 0
    batches_before_epoch: int = 0  # training batches of the finished epochs (val_check_interval)
    elapsed: float = 0.0  # seconds of training so far, over resumes (max_time)
    stop_requested: bool = False
    # A validation inside fit that began and has not reached on_validation_end: a resume runs
    # it again, from the random state it began with (so its draws happen exactly once).
    validation_pending: bool = False
    epoch_end_validated: bool = False  # this epoch's end-of-epoch validation already ran
    # The epoch's schedulers that read no metric stepped after its last batch's step (Lightning's
    # moment, before on_train_batch_end); a checkpoint written after that holds them stepped.
    epoch_schedulers_stepped: bool = False
    # Windows the non-finite guard skipped, (epoch, first micro-batch, end): a resume or a
    # rollback that replays one skips it again (trainer/loops/guard.py).
    skipped_windows: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)
    lr_backoff: float = 1.0  # the learning rates' factor after nonfinite_loss="rollback"
    loss_mean: Any = None  # loss_spike_factor: the mean of the window losses, a device tensor (guard.py)
    loss_count: int = 0
    clock_start: float | None = dataclasses.field(default=None, repr=False)  # set while fit runs
    # While `on_save_checkpoint` runs for a file written at an epoch boundary: the epoch that
    # ended, as the file's `epoch` says and as Lightning's hooks see it (not checkpointed).
    shown_epoch: int | None = dataclasses.field(default=None, repr=False, compare=False)

    def start_clock(self) -> None:
        self.clock_start = time.monotonic() - self.elapsed

    def stop_clock(self) -> None:
        self.elapsed = self.elapsed_now()
        self.clock_start = None

    def elapsed_now(self) -> float:
        return self.elapsed if self.clock_start is None else time.monotonic() - self.clock_start

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "global_step": self.global_step,
            "batches_done": self.batches_done,
            "skipped_steps": self.skipped_steps,
            "batches_before_epoch": self.batches_before_epoch,
            "elapsed": self.elapsed_now(),
            "validation_pending": self.validation_pending,
            "epoch_end_validated": self.epoch_end_validated,
            "epoch_schedulers_stepped": self.epoch_schedulers_stepped,
            "skipped_windows": [list(window) for window in self.skipped_windows],
            "lr_backoff": self.lr_backoff,
            **({} if self.loss_mean is None else {"loss_mean": self.loss_mean.detach().cpu(), "loss_count": self.loss_count}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.batches_done = int(state["batches_done"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.batches_before_epoch = int(state.get("batches_before_epoch", 0))
        self.elapsed = float(state.get("elapsed", 0.0))
        self.validation_pending = bool(state.get("validation_pending", False))
        self.epoch_end_validated = bool(state.get("epoch_end_validated", False))
        self.epoch_schedulers_stepped = bool(state.get("epoch_schedulers_stepped", False))
        self.skipped_windows = [(int(e), int(a), int(b)) for e, a, b in state.get("skipped_windows", [])]
        self.lr_backoff = float(state.get("lr_backoff", 1.0))
        self.loss_mean, self.loss_count = state.get("loss_mean"), int(state.get("loss_count", 0))
        self.stop_requested = False
