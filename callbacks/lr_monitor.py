"""`LearningRateMonitor`: learning rates (and momentum, weight decay) under Lightning's names.

The Trainer already writes `train/lr-groupN` for every parameter group every
`log_every_n_steps` optimizer steps, so this callback is not needed to see the learning
rate. It writes the tags Lightning's LearningRateMonitor writes, so dashboards built for a
Lightning project keep working: `lr-SGD`, `lr-Adam/pg1`, `lr-Adam/pg2` (several parameter
groups), `lr-SGD-1` (a second SGD), a scheduler's `"name"`, or a parameter group's `"name"`;
`<tag>-momentum` and `<tag>-weight_decay` beside them.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import torch

from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["LearningRateMonitor"]


class LearningRateMonitor(Callback):
    """Writes each optimizer's learning rate under Lightning's tags.

    Values go to the Trainer's loggers at `global_step` and are kept in `self.records` (one
    dict per write, with `"step"` or `"epoch"`) and `self.lrs` (tag -> list of values, as
    Lightning keeps them), so they are available with `logger=False` too (Lightning
    refuses to run without a logger). `last_momentum_values` and `last_weight_decay_values`
    hold the newest `<tag>-momentum` / `<tag>-weight_decay` values (None until written), as
    Lightning's.

    Raises:
        ValueError: when training starts, if two parameter groups of one optimizer have the
            same `"name"` (their tags would be one).

    Args:
        logging_interval: "epoch" (every optimizer at each epoch's start), "step" (every
            optimizer before the batch of every logging step, `log_every_n_steps`: the rate
            that step uses, at the step count before it, as Lightning), or None (Lightning's
            rule): a scheduler's optimizer at its scheduler's interval, an optimizer without
            a scheduler at both.
        log_momentum: also write `<tag>-momentum` (`momentum`, or `betas[0]` for Adam-like
            optimizers; 0 when the optimizer has neither, as Lightning writes).
        log_weight_decay: also write `<tag>-weight_decay`.
        log_key_prefix: put before every tag (e.g. `"optim/"`).

    Example:
        >>> import callbacks
        >>> monitor = callbacks.LearningRateMonitor(log_momentum=True)
        >>> monitor.records
        []
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False,
                 log_key_prefix: str | None = None) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise ValueError(
                f"LearningRateMonitor(logging_interval=...) expected 'step', 'epoch' or None. Received: {logging_interval!r}."
            )
        for name, value in (("log_momentum", log_momentum), ("log_weight_decay", log_weight_decay)):
            if not isinstance(value, bool):
                raise ValueError(f"LearningRateMonitor({name}=...) expected a bool. Received: {value!r}.")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.log_key_prefix = log_key_prefix or ""
        self.records: list[dict[str, float]] = []
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        """A new `lrs`, with an empty list for every tag, as Lightning's (values come at logging steps)."""
        for optimizer in trainer.optimizers:
            names = [g.get("name", f"pg{i}") for i, g in enumerate(optimizer.param_groups, start=1)]
            twice = sorted(name for name, count in Counter(names).items() if count > 1)
            if twice:
                raise ValueError(
                    f"LearningRateMonitor: the parameter groups of {type(optimizer).__name__} share the name(s) {twice}, "
                    "so their learning rates would be written under one tag (Lightning: a single `Optimizer` cannot "
                    "have multiple parameter groups with identical `name` values). Expected a distinct 'name' per group."
                )
        found = self.tags(trainer)
        if self.log_momentum and any("momentum" not in opt.defaults and "betas" not in opt.defaults for opt, _, _ in found):
            warnings.warn("You have set log_momentum=True, but some optimizers do not have momentum. This will log a "
                          "value 0 for the momentum.", RuntimeWarning, stacklevel=2)
        self.lrs = {tag: [] for _, _, tags in found for tag in tags}
        self.last_momentum_values = {f"{tag}-momentum": None for tag in self.lrs}
        self.last_weight_decay_values = {f"{tag}-weight_decay": None for tag in self.lrs}

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        if self.logging_interval != "step":
            self._record(trainer, "epoch" if self.logging_interval is None else "any", {"epoch": float(trainer.current_epoch)})

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        """Lightning's rule: before the batch, the rates its step will use, at the step count so far
        (batches so far under manual optimization), when the step after it is a logging step."""
        every = trainer.args.log_every_n_steps
        if self.logging_interval == "epoch" or not every:
            return
        state = trainer.state
        step = trainer.global_step if module.automatic_optimization else state.batches_before_epoch + state.batches_done
        if (step + 1) % every == 0 or trainer.should_stop:
            self._record(trainer, "step" if self.logging_interval is None else "any", {"step": float(step)})

    def tags(self, trainer: Trainer) -> list[tuple[Any, str | None, list[str]]]:
        """(optimizer, its scheduler's interval or None, one tag per parameter group), in Lightning's order:
        the optimizers of the schedulers first, then the others."""
        seen: list[Any] = []
        counts: defaultdict[type, int] = defaultdict(int)
        found: list[tuple[Any, str | None, list[str]]] = []

        def add(optimizer: Any, name: str | None, interval: str | None) -> None:
            seen.append(optimizer)
            if name is None:
                counts[type(optimizer)] += 1
                count = counts[type(optimizer)]
                name = f"lr-{type(optimizer).__name__}" + (f"-{count - 1}" if count > 1 else "")
            groups = optimizer.param_groups
            if len(groups) > 1:
                tags = [f"{name}/{g.get('name', f'pg{i + 1}')}" for i, g in enumerate(groups)]
            else:
                tags = [f"{name}/{groups[0]['name']}" if groups[0].get("name") else name]
            found.append((optimizer, interval, [self.log_key_prefix + t for t in tags]))

        for config in trainer.lr_scheduler_configs:
            optimizer = getattr(config.scheduler, "optimizer", None)
            if optimizer is not None and not any(optimizer is s for s in seen):
                add(optimizer, config.name, config.interval)
        for optimizer in trainer.optimizers:
            if not any(optimizer is s for s in seen):
                add(optimizer, None, None)
        return found

    def _record(self, trainer: Trainer, interval: str, where: dict[str, float]) -> None:
        values: dict[str, float] = {}
        given: dict[str, Any] = {}  # the rates as the optimizer holds them (a float64 keeps its precision)
        for optimizer, scheduled, tags in self.tags(trainer):
            if interval != "any" and scheduled is not None and scheduled != interval:
                continue  # Lightning's rule: a scheduler's optimizer at that scheduler's interval
            betas = "betas" in getattr(optimizer, "defaults", {})
            for group, tag in zip(optimizer.param_groups, tags):
                values[tag] = _number(group["lr"])
                given[tag] = group["lr"]
                self.lrs.setdefault(tag, []).append(values[tag])
                if self.log_momentum:
                    values[f"{tag}-momentum"] = _number(group["betas"][0] if betas else group.get("momentum", 0))
                    self.last_momentum_values[f"{tag}-momentum"] = values[f"{tag}-momentum"]
                if self.log_weight_decay:
                    values[f"{tag}-weight_decay"] = _number(group.get("weight_decay", 0))
                    self.last_weight_decay_values[f"{tag}-weight_decay"] = values[f"{tag}-weight_decay"]
        if not values:
            return
        self.records.append({**where, **values})
        # as Lightning (float32 tensors): monitorable, e.g. by EarlyStopping
        trainer.callback_metrics.update({tag: torch.as_tensor(given.get(tag, value)) for tag, value in values.items()})
        for logger in trainer.loggers:  # logger=[...]: each one
            logger.log_metrics(values, step=int(where.get("step", trainer.global_step)))


def _number(value: Any) -> float:
    return float(value.item()) if hasattr(value, "item") else float(value)
