"""Automatic optimization: the Trainer runs backward and the optimizer step for the module.

One optimizer step per window of `k = accumulate_grad_batches` micro-batches:

    each micro-batch: loss = training_step(batch) / len(window) under autocast;
                      on_before_backward; backward (scaled under amp); on_after_backward
                      ({"loss": summed, "num_items": n}: held, backward at the window's end
                      with summed / total items; items.py)
    window's last:    non-finite guard; on_before_optimizer_step; unscale; clip;
                      stepped = optimizer step; schedulers (interval "step", when stepped);
                      zero_grad; global_step += 1; log every n steps

Module overrides (Lightning's, looked up once per fit; none costs anything when absent):
`optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)` replaces the window's last
micro-batch: its closure runs that micro-batch, and `optimizer.step(closure=...)` runs the
closure, then the guard, `on_before_optimizer_step`, unscale, clip and the step (`optimizer`
is a `LoopOptimizer`); `optimizer_zero_grad` runs where Lightning runs it (after the first
micro-batch's training_step, before its backward) instead of our zeroing after the step, and
so does the zeroing, with `on_before_zero_grad` before it, when a hook of that name is defined
(it then sees the previous step's gradients, as in Lightning);
`configure_gradient_clipping` replaces the clip; `backward(loss)` replaces `loss.backward()`;
`lr_scheduler_step(scheduler, metric)` steps the schedulers.

The AMP order itself lives in `trainer.precision`; this file only says when.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Mapping
from typing import Any

import torch

from trainer.loops.batches import extract_loss, ordered_parameters
from trainer.module import own_hook
from trainer.loops.context import RunContext, module_of, optimizers_of
from trainer.loops.device_skips import DeviceSkips
from trainer.loops.guard import LossSpikes, nonfinite_window
from trainer.loops.items import HeldWindow, is_item_output, mixed_window_error
from trainer.loops.overrides import LoopOptimizer, OverrideSteps, check_overrides, step_schedulers
from trainer.loops.plain import PlainSteps
from trainer.precision import Precision
from trainer.strategies.base import Strategy

__all__ = ["AutomaticOptimization", "copies_kept_losses"]


def copies_kept_losses(compile: Any) -> bool:
    """Whether a loss kept past its step is copied: with `Trainer(compile=...)`, whose CUDA graphs
    (mode "reduce-overhead", ...) replay into the memory of earlier outputs."""
    return bool(compile)


class AutomaticOptimization(PlainSteps, OverrideSteps):
    """Forward, backward and (at a window's end) the optimizer step of one micro-batch."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.opt = opt = optimizers_of(context)
        self.optimizer: torch.optim.Optimizer = opt.optimizer
        # The module's parameters() order: clipping and the logged norm sum in the order a
        # hand-written clip_grad_norm_(model.parameters()) does, whatever the param groups.
        self.parameters = ordered_parameters(module_of(context), [self.optimizer])
        wants = context.hooks.wants  # looked up once per fit: unused hooks cost nothing
        self.want_before_backward = wants("on_before_backward")
        self.want_after_backward = wants("on_after_backward")
        self.want_before_step = wants("on_before_optimizer_step")
        # on_before_zero_grad: this package's callbacks read it right after the step (SWA keeps the
        # step's gradients); the module's and other callbacks' run where Lightning calls it
        self.want_own_zero_grad = context.hooks.wants_in_package("on_before_zero_grad")
        self.want_before_zero_grad = context.hooks.wants_outside_package("on_before_zero_grad")
        self.want_step_end = wants("on_train_step_end")
        module = module_of(context)
        self.step_hook = own_hook(module, "optimizer_step")
        self.zero_hook = own_hook(module, "optimizer_zero_grad")
        # Lightning's place for zero_grad (after the window's first training_step, before its
        # backward) when something watches it: an `optimizer_zero_grad` override, or an
        # `on_before_zero_grad` hook, which then sees the previous step's gradients, as in Lightning
        self.zero_late = self.zero_hook is not None or self.want_before_zero_grad
        self.spent = False  # the gradients present are the last step's, kept for zero_grad at Lightning's place
        self.clip_hook = own_hook(module, "configure_gradient_clipping")
        self.backward_hook = own_hook(module, "backward")
        self.scheduler_hook = own_hook(module, "lr_scheduler_step")
        check_overrides(module, context.precision, opt.schedulers, self.backward_hook, self.scheduler_hook)
        self.proxy = LoopOptimizer(self.optimizer, self) if self.step_hook is not None else None
        self.hooked: dict[str, Any] | None = None  # inside an optimizer_step override: what ran
        self.window_loss: torch.Tensor | None = None
        self.batch_loss: torch.Tensor | None = None  # the last micro-batch's, as backpropagated (detached)
        self.learning_windows = 0  # windows whose loss was backpropagated (not all skipped)
        # A fused optimizer (Adam/AdamW/SGD with fused=True) takes a device-side `found_inf`
        # and skips the update on the device: the non-finite guard then needs no host read
        # per step (under DDP/FSDP the flag's maximum over the ranks, all-reduced on the
        # device); skips are counted on the device and read at logging steps (docs/performance.md).
        self.device_guard = (
            context.args.loss_spike_factor is None and not context.args.nonfinite_grad_norm  # decided with the host read
            and not context.precision.handles_nonfinite
            and bool(getattr(self.optimizer, "_step_supports_amp_scaling", False))
            and context.args.nonfinite_loss not in ("off", "rollback")  # a rollback is decided on the host
        )
        # The host-read guard of the other optimizers (decided once per fit: its step costs one read).
        self.host_guard = not context.precision.handles_nonfinite and context.args.nonfinite_loss != "off"
        # the guard's one host read; on one process `math.isfinite` itself, without a call through the strategy
        strategy = context.strategy
        self.all_finite = math.isfinite if type(strategy).all_finite is Strategy.all_finite else strategy.all_finite
        factor = context.args.loss_spike_factor
        self.spikes = LossSpikes(context, factor) if factor is not None and self.host_guard else None
        self.plain_guard = self.spikes is None and not context.args.nonfinite_grad_norm  # the loss alone is read
        # fp32 on one process: no autocast and no sync context to enter around each micro-batch
        self.bare = context.strategy.world_size == 1 and all(
            isinstance(manager, contextlib.nullcontext)
            for manager in (context.precision.autocast(), context.strategy.no_sync(True), context.strategy.no_sync(False))
        )
        # amp with a fused optimizer: the GradScaler's skip stays on the device too, counted by
        # the precision and read with the rest at logging steps (a Precision subclass whose
        # optimizer_step lacks `defer_skips` keeps its own behaviour). Only when nothing needs to
        # know at once whether the step ran: a step-interval scheduler is not stepped for a
        # skipped step, and `on_train_step_end(stepped)` (e.g. weight averaging) is told the truth.
        self.defer_skips = (
            bool(getattr(self.optimizer, "_step_supports_amp_scaling", False))
            and "defer_skips" in inspect.signature(context.precision.optimizer_step).parameters
            and not optimizers_of(context).has_step_schedulers()
            and not self.want_step_end
        )
        self.device_skips = DeviceSkips(context, self.defer_skips)  # read at logging steps (device_skips.py)
        self.held: HeldWindow | None = None  # an item-weighted window's micro-batches (items.py)
        io = context.output  # the run's first micro-batch: its FLOPs counted once (logging/throughput.py)
        self.flops = io.throughput.meter(io.writes and io.logging_on and not context.args.compile)
        # A compiled module's output may be CUDA-graph memory that the next replay (a validation
        # forward included) overwrites: the loss kept past its step (for the bar and the last
        # step's scalars) is then a copy of it, one scalar copy on the device per step.
        self.copy_kept_loss = copies_kept_losses(context.args.compile)
        # The plain configuration (decided once per fit): one process in fp32, none of the module's
        # step overrides, no hook around backward or the step, and a guard that reads the loss
        # alone. Its micro-batches run in loops/plain.py: the same operations in the same order, in
        # fewer frames and with nothing decided per step (the per-step overhead, docs/performance.md).
        precision = context.precision
        self.plain = (
            self.bare and self.plain_guard and not self.device_guard and not self.defer_skips
            and not self.copy_kept_loss and self.proxy is None and self.zero_hook is None
            and self.clip_hook is None and self.backward_hook is None
            and not (self.want_before_backward or self.want_after_backward or self.want_before_step
                     or self.want_before_zero_grad or self.want_own_zero_grad or self.want_step_end)
            and type(precision).backward is Precision.backward
            and type(precision).optimizer_step is Precision.optimizer_step
        )

    def reset(self) -> None:
        """A training epoch starts (its `on_train_epoch_start` hooks ran): no window is open, so
        gradients made since the last step (a callback's own backward in `on_train_start`, say)
        are released, as Lightning's zero_grad before the epoch's first backward releases them."""
        self.window_loss = None
        self.held = None
        if not self.zero_late:  # zero_grad at Lightning's place runs at the window's start itself
            self.optimizer.zero_grad(set_to_none=True)

    def run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any:
        """One micro-batch; steps the optimizer when it is the last of its window."""
        if self.flops is not None:
            return self._counted(batch, batch_idx, size, last)
        context = self.context
        if self.held is not None:  # an item-weighted window (items.py): forward now, backward at its end
            output = self.held.forward(batch, batch_idx)
            context.output.progress_advance(batch)
            if last:
                self.end_window(batch_idx + 1)
            return output
        if self.plain:
            return self.plain_run(batch, batch_idx, size, last)
        if last and self.step_hook is not None:
            return self._hooked_end(batch, batch_idx, size)
        output = self._micro_batch(batch, batch_idx, size, last)
        context.output.progress_advance(batch)  # counted before the step's logging reads throughput
        if last:
            self.end_window(batch_idx + 1)
        return output

    def batch_end_outputs(self, output: Any) -> Any:
        """What `on_train_batch_end` receives, as in Lightning: `{"loss": the micro-batch's loss
        as it was backpropagated (divided by the window's length), detached, **the other keys
        training_step returned}`; `{}` for a skipped batch. An item-weighted output (`num_items`)
        is passed as returned."""
        if is_item_output(output):
            return output
        if self.batch_loss is None:
            return {}
        extra = {key: value for key, value in output.items() if key != "loss"} if isinstance(output, Mapping) else {}
        return {"loss": self.batch_loss.clone(), **extra}

    def _micro_batch(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any:
        """Forward, loss / window length, backward; the detached loss joins the window's."""
        context = self.context
        self.batch_loss = None
        if self.bare:
            output = context.train_step(batch, batch_idx)
            loss = self._backward(output, batch_idx, size, last)
        else:
            with context.strategy.no_sync(last):
                with context.precision.autocast():
                    output = context.train_step(batch, batch_idx)
                loss = self._backward(output, batch_idx, size, last)
        if loss is not None:
            self.batch_loss = detached = loss.detach()
            self.window_loss = detached if self.window_loss is None else self.window_loss + detached
            if self.hooked is not None:
                self.hooked["loss"] = detached
        return output

    def _backward(self, output: Any, batch_idx: int, size: int, last: bool) -> torch.Tensor | None:
        """The micro-batch's loss (None: skipped, or held by an item-weighted window), divided
        by the window's length and backpropagated, inside the step's contexts."""
        context = self.context
        loss = extract_loss(output, batch_idx)
        if loss is None and last and context.agreement is not None:
            self._check_skipped_everywhere(batch_idx)
        if self.zero_late and batch_idx % (context.args.accumulate_grad_batches or 1) == 0:  # Lightning's place
            if self.want_before_zero_grad:
                context.hooks.call_split("on_before_zero_grad", context.trainer, context.module, self.optimizer, own=False)
            if self.zero_hook is not None:
                self.zero_hook(context.state.epoch, batch_idx, self.optimizer)
            else:
                self.optimizer.zero_grad(set_to_none=True)
            self.spent = False
        if loss is not None and loss is not output and is_item_output(output):
            self._hold(output, loss, batch_idx, last)
            loss = None
        elif loss is not None:
            if size > 1:
                loss = loss / size  # the window's own length: a short last window too
            if self.want_before_backward:
                context.call("on_before_backward", loss)
            if self.backward_hook is not None:
                self.backward_hook(loss)
            else:
                context.precision.backward(loss)
            if self.want_after_backward:
                context.call("on_after_backward")
        return loss

    def _counted(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any:
        """`run` under the FLOP counter, which only reads shapes: the numbers are unchanged."""
        meter, self.flops = self.flops, None
        assert meter is not None
        with meter.counting(batch):
            output = self.run(batch, batch_idx, size, last)
        if not meter.record(backward_ran=self.held is None):
            self.flops = meter  # nothing ran (training_step returned None): count the next one
        return output

    def _check_skipped_everywhere(self, batch_idx: int) -> None:
        """Under DDP/FSDP a window's last micro-batch syncs the gradients in its backward: one
        that returned None must have done so on every rank, or the others wait for this one in
        that all-reduce forever. Agreed through the store (only on this path: no per-step cost)."""
        context = self.context
        agreement = context.agreement
        assert agreement is not None
        timeout = getattr(context.strategy, "timeout", None)
        wait_s = timeout.total_seconds() if timeout is not None else 60.0  # DDP(timeout=...) bounds it
        step = context.state.global_step + 1
        if not agreement.all_skip(step, wait_s):
            raise RuntimeError(
                f"training_step returned None for batch {batch_idx} on rank {context.strategy.rank} of "
                f"{context.strategy.world_size}, but not on every rank: that batch syncs the gradients of optimizer "
                f"step {step}, and the ranks that returned a loss are waiting for this rank's in DDP's all-reduce "
                f"(waited {wait_s:g} s for them to skip too). Expected every rank to return None for the same batch, "
                "or, to skip one rank's batch only, return a loss that keeps it in the all-reduce, such as "
                "`loss * 0` (its gradient then counts as zero in DDP's average)."
            )

    def _hold(self, output: dict[str, Any], loss: torch.Tensor, batch_idx: int, synced: bool) -> None:
        """The window's first `{"loss", "num_items"}` output: hold its graph (items.py)."""
        if self.step_hook is not None:
            raise ValueError(
                f"training_step (batch {batch_idx}) returned 'num_items', and {type(module_of(self.context)).__name__} "
                "overrides optimizer_step: item-weighted accumulation holds the window's graphs until its end, "
                "which an optimizer_step closure cannot do. Expected one of the two: return the loss alone, or "
                "drop the optimizer_step override (a learning-rate warm-up fits a step-interval LR scheduler)."
            )
        if self.window_loss is not None:  # an earlier micro-batch of this window returned a plain loss
            raise mixed_window_error(batch_idx, None, self.context.state.batches_done)
        self.held = HeldWindow(self, batch_idx)
        self.held.add(output, loss, batch_idx, synced)

    def end_window(self, batches_done: int) -> None:
        """Close an accumulation window: guard against non-finite losses, then step. SIGINT
        waits from the optimizer step until the step is counted (the signal guard's critical
        section, entered by `_apply`)."""
        context = self.context
        found_inf = None
        if self.held is not None:
            window_loss = self._close_item_window(batches_done)
            if window_loss is None:
                return
        else:
            window_loss, self.window_loss = self.window_loss, None
            if window_loss is None:
                # Every micro-batch returned None (skipped): no gradient, so no weight moves, but the
                # window counts as a step and the step-interval schedulers advance, as in Lightning.
                self._settle(batches_done, stepped=True, schedulers=True)
                if self.want_step_end:
                    context.call("on_train_step_end", True)
                return
            # A non-finite micro-batch loss makes the window's sum non-finite, so one host read
            # per optimizer step guards the weights (amp's GradScaler makes its own read instead),
            # or none with a fused optimizer, which skips on the device.
            if self.device_guard:
                found_inf = context.strategy.max_over_ranks((~torch.isfinite(window_loss)).float())
            elif self.host_guard and not self.all_finite(window_loss if self.plain_guard else self._guarded(window_loss)):
                self._nonfinite_loss(batches_done)
                return
            elif self.spikes is not None:
                self.spikes.accept(window_loss)
        self.learning_windows += 1
        signals = context.signals
        assert signals is not None, "optimizer steps happen inside fit, under its signal guard"
        try:
            norm, stepped = self._apply(found_inf)
            self._settle(batches_done, stepped, schedulers=stepped)
        finally:
            signals.exit_critical()
        self._report(window_loss, norm, stepped)

    def _guarded(self, window_loss: torch.Tensor) -> torch.Tensor:
        """What the guard's one read checks: the loss, nan where it spikes (`loss_spike_factor`),
        and nan where the gradients' norm is not finite (`nonfinite_grad_norm`), all on the device."""
        if self.spikes is not None:
            window_loss = self.spikes.checked(window_loss)
        if self.context.args.nonfinite_grad_norm:
            window_loss = window_loss + self.context.precision.gradient_norm(self.optimizer, self.parameters) * 0
        return window_loss

    def _close_item_window(self, batches_done: int) -> torch.Tensor | None:
        """The held window's backward passes, then the guard (on the per-item loss, read to the
        host with the total, the same on every rank); its loss, or None when it does not step."""
        held, self.held = self.held, None
        assert held is not None
        window_loss, finite = held.close(batches_done)
        self.context.output.throughput.add_items(held.total_seen)
        args = self.context.args
        if not finite and not self.context.precision.handles_nonfinite and args.nonfinite_loss != "off":
            self._nonfinite_loss(batches_done)
            return None
        return window_loss

    def pending(self) -> bool:
        """Whether skips counted on the device (or not yet reported) wait for `reconcile`."""
        return self.device_skips.pending()

    def reconcile(self, raise_now: bool = True) -> None:
        """Fold the device-counted skips into `skipped_steps` (loops/device_skips.py)."""
        self.device_skips.reconcile(raise_now)

    def _apply(self, found_inf: torch.Tensor | None) -> tuple[torch.Tensor | None, bool]:
        """on_before_optimizer_step; unscale and clip; the step. Leaves the signal guard in its
        critical section (SIGINT waits until `_settle` counted the step)."""
        context = self.context
        precision, args = context.precision, context.args
        optimizer = self.optimizer
        # computed only to be written; decided alike on every rank: under FSDP it is a collective
        norm_wanted = (context.state.global_step + 1) % args.log_every_n_steps == 0 and context.output.logging_on
        if self.want_before_step:
            context.call("on_before_optimizer_step", optimizer)
        signals = context.signals
        assert signals is not None, "optimizer steps happen inside fit, under its signal guard"
        signals.in_critical = True  # SIGINT now waits for the end of the step (see loops/signals.py)
        norm = None
        clip = args.gradient_clip_val
        if self.clip_hook is not None:  # the module's configure_gradient_clipping decides
            norm = precision.gradient_norm(optimizer, self.parameters) if norm_wanted else None
            self.clip_hook(optimizer, clip, args.gradient_clip_algorithm if clip is not None else None)
        elif clip is not None:
            if args.gradient_clip_algorithm == "value" and norm_wanted:
                norm = precision.gradient_norm(optimizer, self.parameters)
            clipped = precision.clip_gradients(optimizer, clip, args.gradient_clip_algorithm, self.parameters)
            norm = clipped if clipped is not None else norm
        elif norm_wanted:
            norm = precision.gradient_norm(optimizer, self.parameters)
        if found_inf is None:
            stepped = precision.optimizer_step(optimizer, defer_skips=True) if self.defer_skips else precision.optimizer_step(optimizer)
        else:  # skipped on the device when found_inf is 1; the host does not wait to know
            optimizer.grad_scale, optimizer.found_inf = None, found_inf  # type: ignore[attr-defined]
            try:
                optimizer.step()
            finally:
                del optimizer.grad_scale, optimizer.found_inf  # type: ignore[attr-defined]
            self.device_skips.add(found_inf)
            stepped = True
        return norm, stepped

    def _settle(self, batches_done: int, stepped: bool, schedulers: bool) -> None:
        """After the step: step-interval schedulers, zero_grad, the counters."""
        context = self.context
        state, optimizer = context.state, self.optimizer
        state.global_step += 1  # lr_scheduler_step sees the step counted, as in Lightning
        state.batches_done = batches_done  # with the step, so what follows sees a clean cut
        if not stepped:
            state.skipped_steps += 1
        if schedulers and self.opt.schedulers:
            self.step_schedulers("step", state.global_step)
        if self.want_own_zero_grad:
            context.hooks.call_split("on_before_zero_grad", context.trainer, context.module, optimizer, own=True)
        if not self.zero_late:  # else at the next window's start, where Lightning zeroes
            optimizer.zero_grad(set_to_none=True)
        self.spent = self.zero_late

    def _report(self, window_loss: torch.Tensor, norm: torch.Tensor | None, stepped: bool) -> None:
        context = self.context
        if self.want_step_end:
            context.call("on_train_step_end", stepped)
        if context.state.global_step % context.args.log_every_n_steps == 0:
            if self.pending():
                self.reconcile()
            context.output.log_step(window_loss, norm)
        else:
            if self.copy_kept_loss and window_loss is self.batch_loss:  # the forward's own memory
                window_loss = window_loss.clone()
            state = context.state
            context.output.step_done(window_loss, state.epoch, state.global_step)  # the bar's loss every 0.5 s; the last step's, written at the end

    def step_schedulers(self, interval: str, count: int, monitored: bool | None = None) -> None:
        """The schedulers of `interval` due at `count` (`monitored`: only those that read a
        metric, only the others, or all); through the module's `lr_scheduler_step` when it
        overrides it."""
        opt = optimizers_of(self.context)
        if self.scheduler_hook is None:
            opt.step_schedulers(interval, count, self.context.read_metric, monitored)  # type: ignore[arg-type]
        else:
            step_schedulers(opt.schedulers, interval, count, self.context.read_metric, self.scheduler_hook, monitored)

    def _nonfinite_loss(self, batches_done: int) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        nonfinite_window(self.context, batches_done)
