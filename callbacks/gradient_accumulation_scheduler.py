"""`GradientAccumulationScheduler`: micro-batches per optimizer step by epoch (Lightning's)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["GradientAccumulationScheduler"]


class GradientAccumulationScheduler(Callback):
    """Sets `trainer.accumulate_grad_batches` at each epoch start from `scheduling`
    ({first epoch: micro-batches per step}; epochs before the first key use 1). Automatic
    optimization only; leave `Trainer(accumulate_grad_batches=...)` at 1.

    Example:
        >>> GradientAccumulationScheduler({0: 1, 4: 2, 8: 4}).get_accumulate_grad_batches(5)
        2
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not scheduling:
            raise ValueError("GradientAccumulationScheduler(scheduling=...) expected a non-empty {epoch: k} dict.")
        bad = {k: v for k, v in scheduling.items()
               if not (isinstance(k, int) and not isinstance(k, bool) and k >= 0)
               or not (isinstance(v, int) and not isinstance(v, bool) and v >= 1)}
        if bad:
            raise ValueError(f"GradientAccumulationScheduler(scheduling=...) expected epochs (int >= 0) mapped to "
                             f"micro-batches per step (int >= 1). Received: {bad!r}.")
        self.scheduling = dict(sorted({0: 1, **scheduling}.items()) if min(scheduling) > 0 else sorted(scheduling.items()))
        self._checked = False

    def going_to_accumulate_grad_batches(self) -> bool:
        """Whether some epoch accumulates (k above 1)."""
        return any(k > 1 for k in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The micro-batches per step of `epoch`."""
        return next(k for first, k in reversed(self.scheduling.items()) if epoch >= first)

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        if not module.automatic_optimization:
            raise RuntimeError("GradientAccumulationScheduler needs automatic optimization; with "
                               "automatic_optimization = False accumulate in training_step yourself.")
        if not self._checked and trainer.accumulate_grad_batches != 1:
            raise ValueError(f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) and a "
                             "GradientAccumulationScheduler were both given. Expected one of them: leave the "
                             "Trainer's at 1, or drop the callback.")
        overridden = [name for name in ("optimizer_step", "optimizer_zero_grad") if _overrides(module, name)]
        if overridden and self.going_to_accumulate_grad_batches():
            warnings.warn(f"{type(module).__name__} overrides {' and '.join(overridden)}: with gradient accumulation "
                          "these hooks will not be called on every batch, only once per optimizer step (after the "
                          "window's last micro-batch).", UserWarning, stacklevel=2)
        most = max(self.scheduling.values())
        if most > 1:  # what the Trainer refuses later (CUDA graphs can't accumulate) is refused now, before any step
            before = trainer.accumulate_grad_batches
            trainer.accumulate_grad_batches = most
            trainer.accumulate_grad_batches = before
        self._checked = True

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)


def _overrides(module: Any, name: str) -> bool:
    """Whether `module`'s class defines hook `name` itself (not the one every module has)."""
    from trainer import LightningModule

    own = getattr(type(module), name, None)
    return own is not None and own is not getattr(LightningModule, name, None)
