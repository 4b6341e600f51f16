"""Manual optimization: the module steps its optimizers itself (Lightning 2's model).

With `self.automatic_optimization = False`, `training_step` does the work a hand-written
loop does, through the Trainer so precision and distribution still apply::

    opt_g, opt_d = self.optimizers()         # ManagedOptimizer wrappers, in configure order
    self.manual_backward(loss)               # scaled under amp; DDP-aware
    self.clip_gradients(opt_d, 1.0)          # unscales first under amp
    opt_d.step(); opt_d.zero_grad()          # a GradScaler step under amp

Under amp one GradScaler serves every optimizer, as PyTorch's "multiple models, losses and
optimizers" recipe does: each `opt.step()` is `scaler.step(opt)` (skipped when its
gradients are not finite) and `scaler.update()` runs once, after `training_step` returns,
if any optimizer stepped. `global_step` counts every `opt.step()` call (skipped ones too),
as Lightning does in manual mode. The Trainer never steps LR schedulers in manual mode:
`self.lr_schedulers()` gives them to the module, which steps them where its loop would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Callable

import torch

from trainer.loops.batches import ordered_parameters
from trainer.loops.context import LoopHost, module_of, optimizers_of

__all__ = ["ManualOptimization", "ManagedOptimizer", "check_manual_arguments"]


def check_manual_arguments(module: Any, args: Any) -> None:
    """Refuse, before any work, Trainer arguments that only describe the automatic step."""
    if module.automatic_optimization:
        return
    for name, value, default in (
        ("accumulate_grad_batches", args.accumulate_grad_batches, 1),
        ("gradient_clip_val", args.gradient_clip_val, None),
    ):
        if value != default:
            raise ValueError(
                f"Trainer({name}={value!r}) applies to automatic optimization, but "
                f"{type(module).__name__}.automatic_optimization is False. Expected {name}={default!r}: "
                "in manual optimization accumulate and clip in training_step (self.clip_gradients(opt, "
                "gradient_clip_val=...); step every n batches), as in Lightning."
            )


class ManagedOptimizer:
    """An optimizer whose `step` goes through the Trainer's precision strategy.

    Every other attribute (`param_groups`, `state`, `state_dict`, `zero_grad`, ...) is the
    wrapped optimizer's. `stepped` tells whether the last `step()` really updated the
    weights (False when amp's GradScaler skipped it for non-finite gradients).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, manual: ManualOptimization) -> None:
        self.__dict__["optimizer"] = optimizer
        self.__dict__["_manual"] = manual
        self.__dict__["stepped"] = False

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run `closure` (if given) and apply the gradients through the precision strategy."""
        result = closure() if closure is not None else None
        self.__dict__["stepped"] = self._manual.step(self.optimizer)
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @contextlib.contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Iterator[None]:
        """Lightning's accumulation helper: only this optimizer's parameters require grad
        inside, and with `sync_grad=False` DDP does not all-reduce the backward passes made
        inside (accumulate locally; sync on the step's micro-batch)."""
        manual = self._manual
        module = module_of(manual.trainer)
        module.toggle_optimizer(self)
        sync = contextlib.nullcontext() if sync_grad else manual.trainer.strategy.manual_no_sync()
        try:
            with sync:
                yield
        finally:
            module.untoggle_optimizer(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.optimizer, name, value)

    def __repr__(self) -> str:
        return f"ManagedOptimizer({self.optimizer!r})"


class ManualOptimization:
    """Runs `training_step` once per batch; its `opt.step()` calls come back here."""

    def __init__(self, trainer: LoopHost) -> None:
        self.trainer = trainer
        self.optimizers = optimizers_of(trainer).optimizers
        self.managed = [ManagedOptimizer(opt, self) for opt in self.optimizers]
        self.parameters = {id(opt): ordered_parameters(module_of(trainer), [opt]) for opt in self.optimizers}
        wants = trainer._dispatch.wants
        self.want_before_step = wants("on_before_optimizer_step")
        self.want_step_end = wants("on_train_step_end")
        self.steps_in_batch = 0

    def reset(self) -> None:
        self.steps_in_batch = 0

    # ------------------------------------------------------------ called by the module
    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        trainer = self.trainer
        if self.want_before_step:
            trainer._call("on_before_optimizer_step", optimizer)
        signals = trainer._signals
        if signals is not None:
            signals.in_critical = True  # the step and its count happen together
        try:
            stepped = trainer._precision.optimizer_step(optimizer, update=False)
            trainer.state.global_step += 1
            if not stepped:
                trainer.state.skipped_steps += 1
            self.steps_in_batch += 1
        finally:
            if signals is not None:
                signals.exit_critical()
        return stepped

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """`Module.manual_backward`: hooks around the strategy's (scaled) backward."""
        trainer = self.trainer
        trainer._call("on_before_backward", loss)
        trainer.strategy.manual_backward(loss, trainer._precision, *args, **kwargs)
        trainer._call("on_after_backward")

    def clip_gradients(self, optimizer: Any, value: float | None, algorithm: str | None) -> torch.Tensor | None:
        """`Module.clip_gradients`: the Trainer's settings by default; 0/None: no clipping."""
        args = self.trainer.args
        value = args.gradient_clip_val if value is None else value
        if value is None or value == 0:
            return None
        algorithm = algorithm or args.gradient_clip_algorithm
        if algorithm not in ("norm", "value"):
            raise ValueError(
                f"clip_gradients(gradient_clip_algorithm=...) expected 'norm' or 'value'. Received: {algorithm!r}."
            )
        raw = optimizer.optimizer if isinstance(optimizer, ManagedOptimizer) else optimizer
        params = self.parameters.get(id(raw))
        if params is None:
            raise ValueError(
                "clip_gradients(optimizer, ...) expected one of the optimizers from self.optimizers(). "
                f"Received: {raw!r}."
            )
        return self.trainer._precision.clip_gradients(raw, value, algorithm, params)  # type: ignore[arg-type]

    # --------------------------------------------------------------- called by the loop
    def run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any:
        trainer = self.trainer
        state = trainer.state
        steps_before = state.global_step
        self.steps_in_batch = 0
        with trainer.precision.autocast():
            output = trainer._train_step(batch, batch_idx)
        if self.steps_in_batch:
            trainer._precision.update()  # once per iteration, after every optimizer's step
        self.steps_in_batch = 0
        state.batches_done = batch_idx + 1
        trainer._io.progress_advance(batch)
        if state.global_step != steps_before:
            if self.want_step_end:
                trainer._call("on_train_step_end", True)
            n = trainer.args.log_every_n_steps
            if state.global_step // n != steps_before // n:
                trainer._io.log_step(_loss_of(output), None)
        return output

    def end_window(self, batches_done: int) -> None:
        self.trainer.state.batches_done = batches_done

    def cut_problem(self) -> str | None:
        if self.steps_in_batch:
            return (
                f"it was requested inside training_step after {self.steps_in_batch} of the batch's "
                "optimizer steps (manual optimization); resuming would repeat them"
            )
        return None


def _loss_of(output: Any) -> torch.Tensor | None:
    loss = output.get("loss") if isinstance(output, dict) else output
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss.detach().reshape(())
    return None
