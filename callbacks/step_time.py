"""`StepTimeBreakdown`: where each rank's step time goes, and which rank or phase is the bottleneck.

    trainer = Trainer(callbacks=[StepTimeBreakdown()], log_every_n_steps=50)

Every optimizer step is cut into input wait, host-to-device copy, forward+backward,
collective wait (DDP's gradient all-reduce), optimizer step and other work
(`trainer/logging/step_time.py` says what each measures). Every `log_every_n_steps` the ranks'
seconds per step are gathered (one small collective, at logging steps only) and written to
the loggers; when fit ends, `summary` names the bottleneck ("input-bound on rank 1", "rank 1
is a straggler in forward+backward", "collective wait dominates") and is logged at INFO by
rank 0. Without this callback the loop does no timing at all.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from trainer import Callback
from trainer.distributed import DDP
from trainer.logging.step_time import PHASES, StepClock, diagnose

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["StepTimeBreakdown"]

log = logging.getLogger("trainer")


class StepTimeBreakdown(Callback):
    """Times every phase of every training step on every rank; logs and diagnoses them.

    Args:
        warmup_steps: the first steps of each fit that are not counted: the first compiles
            (`compile=True`) and starts the loader's workers, the second rebuilds DDP's buckets
            (a collective in its forward).
        per_rank: also write every rank's phases (`step_time/rank<r>/<phase>`); otherwise
            each phase is written as the mean over ranks, its maximum and the rank that has it.

    After fit, `per_rank` holds each rank's seconds per step by phase (and `step`, their sum),
    `steps` the number of steps counted, and `summary` the diagnosis.

    Example:
        >>> from trainer import Trainer
        >>> timer = StepTimeBreakdown()
        >>> trainer = Trainer(callbacks=[timer], logger=False, enable_checkpointing=False)
    """

    def __init__(self, warmup_steps: int = 2, per_rank: bool = False) -> None:
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"StepTimeBreakdown(warmup_steps=...) expected an int >= 0. Received: {warmup_steps!r}.")
        self.warmup_steps, self.write_per_rank = warmup_steps, per_rank
        self.step_clock = StepClock(warmup_steps=warmup_steps)
        self.per_rank: list[dict[str, float]] = []
        self.steps = 0
        self.summary = ""
        self._totals: list[dict[str, float]] = []
        self._hooks: list[Any] = []
        self._manual = False
        self._step_seen = self._flushed_at = 0

    # ------------------------------------------------------------------ a fit's ends
    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        clock = self.step_clock  # the object the loop found when fit started
        clock.reset(trainer.strategy.device, self.warmup_steps)
        self._totals, self.per_rank, self.steps, self.summary = [], [], 0, ""
        self._manual = not module.automatic_optimization
        self._step_seen = self._flushed_at = trainer.global_step
        if isinstance(trainer.strategy, DDP) and trainer.world_size > 1:
            # This rank's last gradient ends its own backward; DDP's all-reduce ends the backward.
            self._hooks = [p.register_post_accumulate_grad_hook(lambda _: clock.mark_ready())
                           for p in module.parameters() if p.requires_grad]
        clock.skip()

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        self._remove_hooks()
        self._flush(trainer)
        self.steps = int(self._totals[0]["steps"]) if self._totals else 0
        self.per_rank = [{k: v / max(self.steps, 1) for k, v in totals.items() if k != "steps"} for totals in self._totals]
        if not self.steps:
            self.summary = "no step was timed (fewer steps than warmup_steps)"
            return
        self.summary = diagnose(self.per_rank)
        if trainer.is_global_zero:
            log.info("Step time over %d steps: %s\n%s", self.steps, self.summary, self.table())

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        self._remove_hooks()

    def _remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    # --------------------------------------------------------------------- the steps
    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        self.step_clock.skip()  # the epoch's end (validation, checkpoints) is not a step's

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self.step_clock.mark("other")

    def on_after_backward(self, trainer: Trainer, module: Any) -> None:
        if not self._manual:
            self.step_clock.mark_backward_end()

    def on_before_zero_grad(self, trainer: Trainer, module: Any, optimizer: Any) -> None:
        # After the step (not on_train_step_end: overriding it makes amp read its verdict at once).
        clock = self.step_clock
        if not self._manual and clock.step_spans and clock.step_spans[-1][0] in ("forward_backward", "collective_wait"):
            clock.mark("optimizer")

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        clock = self.step_clock
        if self._manual:  # training_step ran forward, backward and the optimizer itself
            clock.mark("forward_backward")
        elif clock.step_spans and clock.step_spans[-1][0] == "other" and clock.ready is None:
            clock.mark("forward_backward")  # a micro-batch whose backward waits for its window's end
        if not self._manual and trainer.global_step == self._step_seen:
            clock.mark("other")  # a micro-batch inside an accumulation window
            return
        step = self._step_seen = trainer.global_step
        clock.close_step()
        every = trainer.log_every_n_steps
        if step // every > self._flushed_at // every:  # a logging step reached (or, manually stepping, passed)
            self._flushed_at = step
            self._flush(trainer)
            clock.skip()  # the gathering is not a step's time

    def on_validation_start(self, trainer: Trainer, module: Any) -> None:
        if not trainer.sanity_checking:
            self.step_clock.mark("other")

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        if not trainer.sanity_checking:
            self.step_clock.skip()  # a validation inside the epoch is not a step's time

    # ----------------------------------------------------------------------- writing
    def _flush(self, trainer: Trainer) -> None:
        """Gather every rank's period (one collective, on every rank at the same step), add it to
        the fit's totals, and write the period's seconds per step to the loggers."""
        totals, steps = self.step_clock.flush()
        gathered: list[dict[str, float]] = trainer.strategy.all_gather_object({**totals, "steps": float(steps)})
        if not self._totals:
            self._totals = [dict.fromkeys([*PHASES, "step", "steps"], 0.0) for _ in gathered]
        for kept, period in zip(self._totals, gathered):
            for key, value in period.items():
                kept[key] += value
        if steps and trainer.loggers:
            self._write(trainer, [{k: v / max(p["steps"], 1.0) for k, v in p.items() if k != "steps"} for p in gathered])

    def _write(self, trainer: Trainer, ranks: list[dict[str, float]]) -> None:
        metrics: dict[str, float] = {}
        for phase in (*PHASES, "step"):
            values = [rank[phase] for rank in ranks]
            if len(values) == 1:
                metrics[f"step_time/{phase}"] = values[0]
                continue
            slowest = max(range(len(values)), key=values.__getitem__)
            metrics[f"step_time/{phase}"] = sum(values) / len(values)
            metrics[f"step_time/{phase}/max"] = values[slowest]
            metrics[f"step_time/{phase}/max_rank"] = float(slowest)
            if self.write_per_rank:
                metrics.update({f"step_time/rank{r}/{phase}": v for r, v in enumerate(values)})
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def table(self) -> str:
        """Each rank's milliseconds per step by phase, one line per rank."""
        header = "rank  " + "  ".join(f"{phase:>16}" for phase in (*PHASES, "step"))
        rows = [f"{r:>4}  " + "  ".join(f"{rank[p] * 1e3:>13.2f} ms" for p in (*PHASES, "step"))
                for r, rank in enumerate(self.per_rank)]
        return "\n".join([header, *rows])
