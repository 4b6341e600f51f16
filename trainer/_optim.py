"""What `configure_optimizers` returned, in one shape, and the loop's progress counters."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch

__all__ = ["OptimizerSetup", "parse_optimizers", "LoopState"]

Interval = Literal["step", "epoch"]


@dataclasses.dataclass
class OptimizerSetup:
    """One optimizer and, optionally, its LR scheduler and when it steps."""

    optimizer: torch.optim.Optimizer
    scheduler: Any = None
    interval: Interval = "step"
    monitor: str | None = None  # for ReduceLROnPlateau: the metric passed to step()

    def step_scheduler(self, metrics: dict[str, float] | None = None) -> None:
        if self.scheduler is None:
            return
        if self.monitor is not None:
            if metrics is None or self.monitor not in metrics:
                available = ", ".join(sorted(metrics or {})) or "none"
                raise KeyError(
                    f"The LR scheduler monitors {self.monitor!r}, which was not logged. "
                    f"Logged metrics: {available}. Log it with self.log({self.monitor!r}, ...)."
                )
            self.scheduler.step(metrics[self.monitor])
        else:
            self.scheduler.step()


_FORMS = (
    "an optimizer, a tuple (optimizer, scheduler), or a dict {'optimizer': opt, 'lr_scheduler': "
    "sched} / {'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'interval': 'step' | 'epoch'}}"
)


def parse_optimizers(returned: Any) -> OptimizerSetup:
    """Normalise every form the contract allows; raise a ValueError for anything else."""

    def fail(detail: str) -> ValueError:
        return ValueError(
            f"configure_optimizers() expected {_FORMS}. Received: {detail}."
        )

    if isinstance(returned, torch.optim.Optimizer):
        return OptimizerSetup(returned)
    if isinstance(returned, (tuple, list)):
        if len(returned) == 2 and isinstance(returned[0], torch.optim.Optimizer):
            return _with_scheduler(returned[0], returned[1], fail)
        raise fail(f"a {type(returned).__name__} of length {len(returned)}")
    if isinstance(returned, dict):
        unknown = set(returned) - {"optimizer", "lr_scheduler"}
        if unknown or not isinstance(returned.get("optimizer"), torch.optim.Optimizer):
            raise fail(f"a dict with keys {sorted(returned)}")
        return _with_scheduler(returned["optimizer"], returned.get("lr_scheduler"), fail)
    raise fail(f"{returned!r} of type {type(returned).__name__}")


def _with_scheduler(optimizer: torch.optim.Optimizer, spec: Any, fail: Any) -> OptimizerSetup:
    if spec is None:
        return OptimizerSetup(optimizer)
    if isinstance(spec, dict):
        unknown = set(spec) - {"scheduler", "interval", "monitor"}
        if unknown or "scheduler" not in spec:
            raise fail(f"an lr_scheduler dict with keys {sorted(spec)}")
        interval = spec.get("interval", "step")
        if interval not in ("step", "epoch"):
            raise fail(f"lr_scheduler interval {interval!r} (expected 'step' or 'epoch')")
        scheduler, monitor = spec["scheduler"], spec.get("monitor")
    else:
        scheduler, interval, monitor = spec, "step", None
    if not hasattr(scheduler, "step") or not hasattr(scheduler, "state_dict"):
        raise fail(f"a scheduler {scheduler!r} without step()/state_dict()")
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and monitor is None:
        raise fail("ReduceLROnPlateau without a 'monitor' metric name")
    return OptimizerSetup(optimizer, scheduler, interval, monitor)


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
    stop_requested: bool = False

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "global_step": self.global_step,
            "batches_done": self.batches_done,
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.batches_done = int(state["batches_done"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.stop_requested = False
