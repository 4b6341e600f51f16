"""Lightning's type aliases (`lightning.pytorch.utilities.types`), for the annotations of code
that moves over by its imports: `def training_step(self, batch, batch_idx) -> STEP_OUTPUT`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

__all__ = [
    "STEP_OUTPUT", "TRAIN_DATALOADERS", "EVAL_DATALOADERS", "OptimizerLRScheduler", "LRSchedulerTypeUnion",
    "LRSchedulerPLType", "LRSchedulerConfigType", "OptimizerLRSchedulerConfig",
]

STEP_OUTPUT = Union[torch.Tensor, Mapping[str, Any], None]
"""What a `*_step` returns: a loss, a dict with "loss", or None."""
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerPLType = LRSchedulerTypeUnion
LRSchedulerConfigType = dict[str, Any]
OptimizerLRSchedulerConfig = dict[str, Any]
OptimizerLRScheduler = Union[
    Optimizer,
    Sequence[Optimizer],
    tuple[Sequence[Optimizer], Sequence[Union[LRSchedulerTypeUnion, LRSchedulerConfigType]]],
    OptimizerLRSchedulerConfig,
    Sequence[OptimizerLRSchedulerConfig],
    None,
]
"""What `configure_optimizers` returns (every form the Trainer reads)."""
