"""Lightning's `lightning.pytorch.core.optimizer.LightningOptimizer`, for annotations and
`isinstance` checks: the optimizer `optimizer_step` receives and the ones `self.optimizers()`
returns under manual optimization are instances of it (their `.optimizer` is the torch one).

Example:
    >>> from trainer.core.optimizer import LightningOptimizer
    >>> from trainer.loops.overrides import LoopOptimizer
    >>> issubclass(LoopOptimizer, LightningOptimizer)
    True
"""

from __future__ import annotations

import abc

from trainer.loops.manual import ManagedOptimizer
from trainer.loops.overrides import LoopOptimizer

__all__ = ["LightningOptimizer"]


class LightningOptimizer(abc.ABC):  # noqa: B024 - a type to check against, nothing to implement
    """The Trainer's wrapper of a torch optimizer (see the module)."""


LightningOptimizer.register(LoopOptimizer)
LightningOptimizer.register(ManagedOptimizer)
