"""`LearningRateMonitor`: learning rate and momentum once per epoch.

The Trainer already writes `train/lr-groupN` for every parameter group every
`log_every_n_steps` optimizer steps, so this callback is not needed to see the learning
rate. It adds what the automatic logging leaves out: one value per epoch (handy with
epoch-interval schedulers and in `trainer.history`-style tables) and, optionally, the
momentum (`momentum`, or `betas[0]` for Adam-like optimizers).
"""

from __future__ import annotations

from typing import Any

from trainer import Callback

__all__ = ["LearningRateMonitor"]


class LearningRateMonitor(Callback):
    """Writes `lr-epoch/groupN` (and `momentum-epoch/groupN`) at the start of every training epoch.

    Values go to the Trainer's logger at `global_step` and are kept in `self.records`
    (one dict per epoch), so they are available with `logger=False` too.

    Args:
        log_momentum: also record each group's momentum (`momentum` or `betas[0]`).

    Example:
        >>> import callbacks
        >>> monitor = callbacks.LearningRateMonitor(log_momentum=True)
        >>> monitor.records
        []
    """

    def __init__(self, log_momentum: bool = False) -> None:
        if not isinstance(log_momentum, bool):
            raise ValueError(f"LearningRateMonitor(log_momentum=...) expected a bool. Received: {log_momentum!r}.")
        self.log_momentum = log_momentum
        self.records: list[dict[str, float]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        optimizer = trainer.optimizer
        if optimizer is None:
            return
        values: dict[str, float] = {}
        for i, group in enumerate(optimizer.param_groups):
            values[f"lr-epoch/group{i}"] = _number(group["lr"])
            if self.log_momentum:
                momentum = group.get("momentum", (group.get("betas") or (None,))[0])
                if momentum is not None:
                    values[f"momentum-epoch/group{i}"] = _number(momentum)
        self.records.append({"epoch": float(trainer.current_epoch), **values})
        if trainer.logger is not None:
            trainer.logger.log_metrics(values, step=trainer.global_step)


def _number(value: Any) -> float:
    return float(value.item()) if hasattr(value, "item") else float(value)
