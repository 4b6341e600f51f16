"""The plain configuration's micro-batch, in as few frames as it takes.

Most runs are plain: one process in fp32, no module override of the step (`optimizer_step`,
`backward`, `optimizer_zero_grad`, `configure_gradient_clipping`), no hook around backward or
the step, and a non-finite guard that reads the loss alone. `AutomaticOptimization` decides that
once per fit (`plain`) and runs such micro-batches here: the same operations in the same order
as its general path (automatic.py), without the per-step decisions that path makes. A window's
end that clips, may write a gradient norm, skips a non-finite loss or closes an item-weighted
window goes through the general path's own pieces. tests/loops/test_plain_path.py runs every
such case both ways and compares the weights, counters and logged values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from trainer.loops.batches import extract_loss
from trainer.loops.items import is_item_output

if TYPE_CHECKING:
    from collections.abc import Callable

    from trainer.loops.context import RunContext
    from trainer.loops.optimizers import OptimizerSetup
    from trainer.loops.signals import SignalGuard

__all__ = ["PlainSteps"]


class PlainSteps:
    """The part of `AutomaticOptimization` (automatic.py) that runs the plain configuration."""

    if TYPE_CHECKING:
        context: RunContext
        optimizer: torch.optim.Optimizer
        opt: OptimizerSetup
        held: Any
        flops: Any
        window_loss: torch.Tensor | None
        batch_loss: torch.Tensor | None
        host_guard: bool
        all_finite: Callable[[torch.Tensor], bool]
        learning_windows: int

        def run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any: ...
        def _hold(self, output: dict[str, Any], loss: torch.Tensor, batch_idx: int, synced: bool) -> None: ...
        def end_window(self, batches_done: int) -> None: ...
        def _apply(self, found_inf: torch.Tensor | None) -> tuple[torch.Tensor | None, bool]: ...
        def _report(self, window_loss: torch.Tensor, norm: torch.Tensor | None, stepped: bool) -> None: ...
        def _nonfinite_loss(self, batches_done: int) -> None: ...
        def step_schedulers(self, interval: str, count: int, monitored: bool | None = None) -> None: ...

    def plain_run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any:
        """`run` in the plain configuration, which the fit loop calls directly: `_micro_batch`,
        then at the window's end `_plain_step`. The first step's FLOP count and an item-weighted
        window are `run`'s."""
        if self.flops is not None or self.held is not None:
            return self.run(batch, batch_idx, size, last)
        context = self.context
        output = context.train_step(batch, batch_idx)
        if type(output) is Tensor and output.requires_grad and output.ndim == 0:  # extract_loss's common case
            loss: torch.Tensor | None = output
        else:
            loss = extract_loss(output, batch_idx)
        if loss is None:
            self.batch_loss = None
        elif loss is not output and is_item_output(output):
            self.batch_loss = None
            self._hold(output, loss, batch_idx, last)
        else:
            if size > 1:
                loss = loss / size  # the window's own length: a short last window too
            loss.backward()
            self.batch_loss = detached = loss.detach()
            self.window_loss = detached if self.window_loss is None else self.window_loss + detached
        context.output.progress_advance(batch)  # counted before the step's logging reads throughput
        if last:
            if self.held is None and self.window_loss is not None:
                self._plain_step(batch_idx + 1)
            else:
                self.end_window(batch_idx + 1)
        return output

    def _plain_step(self, batches_done: int) -> None:
        """`end_window` in the plain configuration: the guard's one read, the step (through
        `_apply` when it clips or a norm may be written), the counters, the report."""
        context = self.context
        window_loss: torch.Tensor = self.window_loss  # type: ignore[assignment]  # `plain_run` checked it
        self.window_loss = None
        if self.host_guard and not self.all_finite(window_loss):
            self._nonfinite_loss(batches_done)
            return
        self.learning_windows += 1
        state, args = context.state, context.args
        signals: SignalGuard = context.signals  # type: ignore[assignment]  # steps happen inside fit, under its guard
        every = args.log_every_n_steps
        step = state.global_step + 1  # this step's number, once it is counted
        try:
            if args.gradient_clip_val is not None or step % every == 0:
                norm, _ = self._apply(None)
            else:
                norm = None
                signals.in_critical = True  # SIGINT now waits for the end of the step (see loops/signals.py)
                self.optimizer.step()
            # `_settle` for a step that ran, with no zero-grad hook or override
            state.global_step = step
            state.batches_done = batches_done
            if self.opt.schedulers:
                self.step_schedulers("step", step)
            self.optimizer.zero_grad(set_to_none=True)
        finally:  # `signals.exit_critical()`, inline: it raises only for a SIGINT deferred by the step
            signals.in_critical = False
            if signals.interrupt_deferred:
                signals.exit_critical()
        if step % every == 0:
            self._report(window_loss, norm, True)
        else:
            context.output.step_done(window_loss, state.epoch, step)  # the bar's loss every 0.5 s; the last step's, written at the end
