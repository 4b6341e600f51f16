"""When the fit loop validates and how far each loop runs: Lightning's limits and cadence.

* `limit_<stage>_batches`: an int caps the batches of an epoch, a float in [0, 1] takes that
  fraction of `len(loader)` (rounded down, at least one batch unless it is 0); 0 disables
  the stage (validation inside fit is skipped).
* `val_check_interval`: a float in (0, 1] validates every `int(fraction * batches)` batches
  of the epoch, the epoch's end included; an int validates every that many training batches
  (of the epoch, or of the whole run when `check_val_every_n_epoch=None`). Validation always
  runs at an optimizer-step boundary: with accumulation, after the step of the window that
  holds the scheduled batch.
* `check_val_every_n_epoch`: validate in every n-th epoch only.
"""

from __future__ import annotations

from trainer._utils import parse_max_time

__all__ = ["batch_limit", "parse_max_time", "ValidationSchedule"]


def batch_limit(limit: int | float | None, length: int | None, name: str) -> int | None:
    """Batches an epoch runs under `limit` (None: no cap); `length` is len(loader) or None."""
    if limit is None or (isinstance(limit, float) and limit == 1.0):
        return length
    if isinstance(limit, int):
        return limit if length is None else min(limit, length)
    if length is None:
        raise ValueError(
            f"Trainer({name}={limit}) is a fraction of the epoch, but the loader has no len() "
            f"(an iterable dataset). Expected an int number of batches for such a loader: "
            f"{name}=100, say."
        )
    count = int(length * limit)
    return max(count, 1) if limit > 0 else 0




class ValidationSchedule:
    """Decides, at each optimizer-step boundary and at each epoch's end, whether to validate."""

    def __init__(self, interval: int | float | None, every_n_epochs: int | None, epoch_batches: int | None) -> None:
        self.every_n_epochs = every_n_epochs
        self.run_wide = isinstance(interval, int) and every_n_epochs is None
        self.step: int | None = None  # validate every `step` batches (None: at epoch ends only)
        if isinstance(interval, float) and interval < 1.0:
            if epoch_batches is None:
                raise ValueError(
                    f"Trainer(val_check_interval={interval}) is a fraction of the epoch, but the training "
                    "loader has no len(). Expected an int number of batches, with "
                    "check_val_every_n_epoch=None to count them over the whole run."
                )
            self.step = max(1, int(epoch_batches * interval))
        elif isinstance(interval, int):
            if not self.run_wide and epoch_batches is not None and interval > epoch_batches:
                raise ValueError(
                    f"Trainer(val_check_interval={interval}) is more than the {epoch_batches} training batches "
                    "of an epoch, so validation would never run. Expected at most that many, or "
                    "check_val_every_n_epoch=None to count batches over the whole run."
                )
            self.step = interval
        self.at_fraction = isinstance(interval, float) or interval is None

    def epoch_validates(self, epoch: int) -> bool:
        return self.every_n_epochs is None or (epoch + 1) % self.every_n_epochs == 0

    def crossed(self, epoch: int, before: int, after: int, run_before: int) -> bool:
        """Whether a step that moved the epoch's position from `before` to `after` batches
        (`run_before` batches completed in earlier epochs) passed a scheduled validation."""
        if self.step is None or not self.epoch_validates(epoch):
            return False
        if self.run_wide:
            return (run_before + after) // self.step > (run_before + before) // self.step
        return after // self.step > before // self.step

    def at_epoch_end(self, epoch: int, crossed_at_end: bool) -> bool:
        """Validate at the end of `epoch`: always for the default (once per epoch), else when
        the epoch's last step reached a scheduled batch. As Lightning: a fraction that does not
        divide the epoch (0.4 of 10 batches: after batches 4 and 8) adds no validation at its end."""
        if not self.epoch_validates(epoch):
            return False
        return (self.at_fraction and self.step is None) or crossed_at_end
