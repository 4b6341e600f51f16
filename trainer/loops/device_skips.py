"""Optimizer steps skipped on the device, counted there and read to the host only at logging
steps, epoch ends and saves.

A fused optimizer (Adam/AdamW/SGD with `fused=True`) takes a device-side `found_inf` and skips
its update on the device, so the non-finite guard needs no host read per step; under amp with
such an optimizer the GradScaler's skips stay on the device too (the precision counts them).
`DeviceSkips` keeps the running count and folds it into `skipped_steps` when read.
"""

from __future__ import annotations

import logging

import torch

from trainer.loops.context import RunContext

__all__ = ["DeviceSkips"]

log = logging.getLogger("trainer")


class DeviceSkips:
    """The device-side count of skipped optimizer steps since the last read."""

    def __init__(self, context: RunContext, amp_deferred: bool) -> None:
        self.context = context
        self.amp_deferred = amp_deferred  # amp's skips are counted by the precision (`take_device_skips`)
        self.count: torch.Tensor | None = None  # the loss guard's skips, not yet read
        self.since = context.state.global_step
        self.where: list[str] = []  # counted, not yet reported

    def add(self, found_inf: torch.Tensor) -> None:
        """One step's flag (1: skipped on the device), added without a host read."""
        self.count = found_inf if self.count is None else self.count + found_inf

    def pending(self) -> bool:
        """Whether skips counted on the device (or not yet reported) wait for `reconcile`."""
        return self.count is not None or bool(self.where) or self.amp_deferred

    def reconcile(self, raise_now: bool = True) -> None:
        """Fold the device-counted skips into `skipped_steps` (one host read). Under
        nonfinite_loss="error" a skip of the loss guard then raises (a save counts it and leaves
        the error to the next logging step or epoch end); amp's skips are only counted, as amp
        always skips such steps."""
        context = self.context
        pending, self.count = self.count, None
        since, self.since = self.since, context.state.global_step
        count = int(pending.item()) if pending is not None else 0
        state = context.state
        amp_skips = context.precision.take_device_skips() if self.amp_deferred else None
        if amp_skips is not None:
            state.skipped_steps += int(amp_skips.item())
        if count:
            state.skipped_steps += count
            self.where.append(f"{count} of optimizer steps {since + 1}..{state.global_step}")
        if not self.where or not raise_now:
            return
        where = "; ".join(self.where)
        self.where = []
        if context.args.nonfinite_loss == "error":
            raise FloatingPointError(
                f"training_step returned a non-finite loss (nan or inf) at {where}; the fused optimizer skipped "
                "those steps on the device, so the weights were not updated by them. Expected finite losses: "
                "lower the learning rate, check the data, or pass Trainer(nonfinite_loss='skip')."
            )
        log.warning("Skipped %s: non-finite loss (nonfinite_loss='skip', counted on the device).", where)
