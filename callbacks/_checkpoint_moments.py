"""Where a fit is when `ModelCheckpoint` decides to save: whether the run validates, whether a
validation follows the epoch's last batch, whether a validation runs inside the epoch (Lightning's rules).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer import Trainer


def _validates(trainer: Trainer) -> bool:
    """Whether this fit validates at all (Lightning: `num_val_batches > 0`)."""
    return sum(trainer.num_val_batches) > 0


def _validation_follows(trainer: Trainer) -> bool:
    """Lightning's guess that a validation runs after the epoch's last batch."""
    n = trainer.args.check_val_every_n_epoch
    return _validates(trainer) and (n is None or (trainer.current_epoch + 1) % n == 0)


def _last_batch(trainer: Trainer) -> bool:
    return trainer.state.batches_done >= trainer.num_training_batches


def _mid_epoch(trainer: Trainer) -> bool:
    """Whether the current validation runs inside the epoch (`val_check_interval`), not at its end."""
    if math.isinf(trainer.num_training_batches):  # no len(): only an int interval validates inside
        return isinstance(trainer.args.val_check_interval, int)
    return trainer.state.batches_done < trainer.num_training_batches
