"""`LearningRateMonitor`: learning rate and momentum once per epoch.

The Trainer already writes `train/lr-groupN` for every parameter group every
`log_every_n_steps` optimizer steps, so this callback is not needed to see the learning
rate. It adds what the automatic logging leaves out: one value per epoch (handy with
epoch-interval schedulers and in `trainer.history`-style tables) and, optionally, the
momentum (`momentum`, or `betas[0]` for Adam-like optimizers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["LearningRateMonitor"]


class LearningRateMonitor(Callback):
    """Writes `lr-epoch/groupN` (and `momentum-epoch/groupN`) at the start of every training epoch;
    with several optimizers, optimizer K > 0 writes `lr-epoch/optK/groupN`.

    Values go to the Trainer's logger at `global_step` and are kept in `self.records`
    (one dict per epoch), so they are available with `logger=False` too.

    Args:
        logging_interval: "epoch" (at each epoch's start, tags `lr-epoch/groupN`), "step"
            (at every logging step, `log_every_n_steps`, tags `lr-step/groupN`), or None:
            "step" when some scheduler steps per step, else "epoch" (Lightning's rule).
        log_momentum: also record each group's momentum (`momentum` or `betas[0]`).

    Example:
        >>> import callbacks
        >>> monitor = callbacks.LearningRateMonitor(log_momentum=True)
        >>> monitor.records
        []
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise ValueError(
                f"LearningRateMonitor(logging_interval=...) expected 'step', 'epoch' or None. Received: {logging_interval!r}."
            )
        if not isinstance(log_momentum, bool):
            raise ValueError(f"LearningRateMonitor(log_momentum=...) expected a bool. Received: {log_momentum!r}.")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.records: list[dict[str, float]] = []

    def _interval(self, trainer: Trainer) -> str:
        if self.logging_interval is not None:
            return self.logging_interval
        return "step" if any(c.interval == "step" for c in trainer.lr_scheduler_configs) else "epoch"

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        if self._interval(trainer) == "epoch":
            self._record(trainer, "epoch", {"epoch": float(trainer.current_epoch)})

    def on_train_step_end(self, trainer: Trainer, module: Any, stepped: bool) -> None:
        if self._interval(trainer) == "step" and trainer.global_step % trainer.args.log_every_n_steps == 0:
            self._record(trainer, "step", {"step": float(trainer.global_step)})

    def _record(self, trainer: Trainer, interval: str, where: dict[str, float]) -> None:
        if not trainer.optimizers:
            return
        values: dict[str, float] = {}
        for k, optimizer in enumerate(trainer.optimizers):  # optimizer k > 0: `.../optK/groupN`
            prefix = f"opt{k}/" if k else ""
            for i, group in enumerate(optimizer.param_groups):
                values[f"lr-{interval}/{prefix}group{i}"] = _number(group["lr"])
                if self.log_momentum:
                    momentum = group.get("momentum", (group.get("betas") or (None,))[0])
                    if momentum is not None:
                        values[f"momentum-{interval}/{prefix}group{i}"] = _number(momentum)
        self.records.append({**where, **values})
        for logger in trainer.loggers:  # logger=[...]: each one
            logger.log_metrics(values, step=trainer.global_step)


def _number(value: Any) -> float:
    return float(value.item()) if hasattr(value, "item") else float(value)
