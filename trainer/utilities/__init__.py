"""Lightning's `lightning.pytorch.utilities` that user code imports, at the same paths:
`trainer.utilities` (rank-zero helpers, `grad_norm`, `seed_everything`, `move_data_to_device`),
`trainer.utilities.rank_zero`, `trainer.utilities.types` (type aliases for annotations),
`trainer.utilities.exceptions` (`MisconfigurationException`), `trainer.utilities.combined_loader`
(`CombinedLoader`, also here), and this Trainer's `Mixture` (training sources drawn by weight).

Example:
    >>> from trainer.utilities import rank_zero_only
    >>> @rank_zero_only
    ... def report(text):
    ...     return f"rank 0 says {text}"
    >>> report("hello")
    'rank 0 says hello'
"""

from __future__ import annotations

from typing import Any

import torch

from trainer._utils import move_to_device, seed_everything
from trainer.loops.mixture import Mixture
from trainer.utilities.combined_loader import CombinedLoader
from trainer.utilities.grads import grad_norm
from trainer.utilities.rank_zero import (
    rank_prefixed_message, rank_zero_debug, rank_zero_deprecation, rank_zero_info, rank_zero_only, rank_zero_warn,
)

__all__ = [
    "rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_debug", "rank_zero_deprecation",
    "rank_prefixed_message", "seed_everything", "model_summary", "grad_norm", "CombinedLoader", "Mixture",
    "move_data_to_device",
]


def move_data_to_device(batch: Any, device: Any) -> Any:
    """Every tensor of a nested collection (lists, tuples, dicts, dataclasses) moved to `device`
    (a `torch.device` or its name, such as `"cuda:0"`); other leaves are left alone."""
    return move_to_device(batch, device if isinstance(device, torch.device) else torch.device(device))


def model_summary(module: Any, max_depth: int = 1) -> str:
    """The table `enable_model_summary` logs when fit starts (Lightning's `summarize(...)` as text)."""
    from trainer.logging.summary import summarize

    return summarize(module, max_depth)
