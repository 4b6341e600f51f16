"""Manual optimization: the module steps its optimizers itself (Lightning 2's model).

With `self.automatic_optimization = False`, `training_step` does the work a hand-written
loop does, through the Trainer so precision and distribution still apply::

    opt_g, opt_d = self.optimizers()         # ManagedOptimizer wrappers, in configure order
    self.manual_backward(loss)               # scaled under amp; DDP-aware
    self.clip_gradients(opt_d, 1.0)          # unscales first under amp
    opt_d.step(); opt_d.zero_grad()          # a GradScaler step under amp

`training_step` runs inside the strategy's autocast; every `opt.step()` clears autocast's
weight cache, so a forward after a step casts the updated weights, as PyTorch's recipe
(autocast around each forward) does.

Under amp one GradScaler serves every optimizer. Each `opt.step()` is `scaler.step(opt)`
(skipped when its gradients are not finite); `scaler.update()` runs lazily: before the next
`manual_backward` that follows a step taken since the last update (also before a second
step or an unscale of an optimizer that already stepped), and when `training_step` returns
if a step or an unscale (`clip_gradients` without a step) is still pending. This equals
PyTorch's recipes: backward-all-then-step-all with one update per iteration, and an update
after each step when backward and step alternate (n_critic loops, the DCGAN order).
`global_step` counts every `opt.step()` call (skipped ones too), as Lightning does in
manual mode (under automatic optimization a `training_step` that steps `self.optimizers()`
itself leaves the count to the automatic loop: one per batch, as Lightning's). The Trainer never steps LR schedulers in manual mode: `self.lr_schedulers()`
gives them to the module, which steps them where its loop would.

A checkpoint between two training_steps is a cut unless the module is accumulating:
gradients left in `.grad` after its own `opt.step()` (Lightning's `zero_grad()` before
`manual_backward`) are not an open window; an optimizer whose gradients a `manual_backward`
changed since its last step, and which did not step in the last training_step (or any
backward after the last step of all), is one, and the save is refused.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Callable

import torch

from trainer.precision import needs_closure
from trainer.loops.batches import ordered_parameters
from trainer.module import own_hook
from trainer.loops.context import RunContext, module_of, optimizers_of
from trainer._utils import WeakAttribute

__all__ = ["ManualOptimization", "ManagedOptimizer", "check_manual_arguments"]


def check_manual_arguments(module: Any, args: Any) -> None:
    """Refuse, before any work, Trainer arguments that only describe the automatic step."""
    if module.automatic_optimization:
        return
    if args.nonfinite_loss in ("skip", "rollback"):
        raise ValueError(
            f"Trainer(nonfinite_loss={args.nonfinite_loss!r}) guards the automatic step, but {type(module).__name__}."
            "automatic_optimization is False. Expected nonfinite_loss='error' or 'off': in manual optimization check "
            "the loss in training_step (torch.isfinite(loss)) and skip opt.step() yourself."
        )
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
        self.__dict__["_manual_ref"] = weakref.ref(manual)  # the manual loop holds this: no cycle
        self.__dict__["stepped"] = False

    @property
    def _manual(self) -> ManualOptimization:
        manual = self.__dict__["_manual_ref"]()
        if manual is None:
            raise RuntimeError("This optimizer's Trainer no longer exists: step it inside a Trainer's fit.")
        return manual  # type: ignore[no-any-return]

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run `closure` (if given) and apply the gradients through the precision strategy; an
        optimizer that evaluates the loss itself (LBFGS) gets the closure, as in PyTorch."""
        if needs_closure(self.optimizer):
            if closure is None:
                raise ValueError(
                    f"{type(self.optimizer).__name__}.step needs a closure that recomputes the loss. Expected "
                    "opt.step(closure=closure), with closure() calling opt.zero_grad(), the forward, "
                    "self.manual_backward(loss) and returning the loss."
                )
            results: list[Any] = []

            def recorded() -> Any:
                torch.clear_autocast_cache()  # the optimizer moved the weights in place since the last evaluation
                value = closure()
                if not results:
                    results.append(value)
                return value

            self.__dict__["stepped"] = self._manual.step(self.optimizer, closure=recorded)
            return results[0] if results else None
        result = closure() if closure is not None else None
        self.__dict__["stepped"] = self._manual.step(self.optimizer)
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)
        self._manual.mark(self.optimizer)

    @contextlib.contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Iterator[None]:
        """Lightning's accumulation helper: only this optimizer's parameters require grad
        inside, and with `sync_grad=False` DDP does not all-reduce the backward passes made
        inside (accumulate locally; sync on the step's micro-batch)."""
        manual = self._manual
        module = module_of(manual.context)
        module.toggle_optimizer(self)
        sync = contextlib.nullcontext() if sync_grad else manual.context.strategy.manual_no_sync()
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

    context: WeakAttribute[RunContext] = WeakAttribute()  # the run context owns this object: no reference cycle

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.optimizers = optimizers_of(context).optimizers
        self.managed = [ManagedOptimizer(opt, self) for opt in self.optimizers]
        self.parameters = {id(opt): ordered_parameters(module_of(context), [opt]) for opt in self.optimizers}
        wants = context.hooks.wants
        # A module's backward() override runs in manual_backward too (Lightning's); checked as in automatic.py.
        hook = own_hook(module_of(context), "backward")
        if hook is not None:
            from trainer.loops.overrides import check_overrides

            check_overrides(module_of(context), context.precision, [], hook, None)
        self.backward_through: Any = _ModuleBackward(hook) if hook is not None else None
        self.want_before_step = wants("on_before_optimizer_step")
        self.want_step_end = wants("on_train_step_end")
        self.steps_in_batch = 0
        # For the cut between training_steps (see `open_window`).
        self.inside = False
        self.backward_after_step = False
        self.stepped_in_batch: set[int] = set()
        self.marks: dict[int, list[Any]] = {}
        for opt in self.optimizers:
            self.mark(opt)  # gradients already there (an earlier fit's) are not this run's window
        io = context.output  # the run's first training_step: its FLOPs counted once (logging/throughput.py)
        self.flops = io.throughput.meter(io.writes and io.logging_on and not context.args.compile)

    def reset(self) -> None:
        self.steps_in_batch = 0

    # ------------------------------------------------------------ called by the module
    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> bool:
        context = self.context
        if self.want_before_step:
            context.call("on_before_optimizer_step", optimizer)
        signals = context.signals
        if signals is not None:
            signals.in_critical = True  # the step and its count happen together
        # Under automatic optimization (a `training_step` that steps `self.optimizers()` itself and
        # returns None, as ProtoMAML's outer loop does) the automatic loop counts its one step per
        # batch, as Lightning's does: this step is not counted again, and settles its amp update now.
        manual = not module_of(context).automatic_optimization
        if not manual and closure is None:
            self._clip_as_automatic(optimizer)
        try:
            stepped = context.precision.optimizer_step(optimizer, update=not manual, closure=closure)
            if manual:
                context.state.global_step += 1
                if not stepped:
                    context.state.skipped_steps += 1
            self.steps_in_batch += 1
            self.stepped_in_batch.add(id(optimizer))
            self.backward_after_step = False
            self.mark(optimizer)
        finally:
            if signals is not None:
                signals.exit_critical()
        _recast_after_step(self.device_type)
        return stepped

    def _clip_as_automatic(self, optimizer: torch.optim.Optimizer) -> None:
        """Under automatic optimization every step is clipped, one the module takes itself too (as
        Lightning clips every step its precision takes): the module's `configure_gradient_clipping`,
        else the Trainer's `gradient_clip_val`."""
        args = self.context.args
        clip = args.gradient_clip_val
        hook = own_hook(module_of(self.context), "configure_gradient_clipping")
        if hook is not None:
            hook(optimizer, clip, args.gradient_clip_algorithm if clip is not None else None)
        elif clip is not None and clip != 0:
            self.context.precision.clip_gradients(optimizer, clip, args.gradient_clip_algorithm, self.parameters[id(optimizer)])

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """`Module.manual_backward`: hooks around the strategy's (scaled) backward."""
        context = self.context
        context.call("on_before_backward", loss)
        self.backward_after_step = True
        context.strategy.manual_backward(loss, self.backward_through or context.precision, *args, **kwargs)
        context.call("on_after_backward")

    def mark(self, optimizer: torch.optim.Optimizer) -> None:
        """Remember `optimizer`'s gradients as they are now (after its step or zero_grad)."""
        self.marks[id(optimizer)] = [_grad_mark(p) for p in _params(optimizer)]

    def clip_gradients(self, optimizer: Any, value: float | None, algorithm: str | None) -> torch.Tensor | None:
        """`Module.clip_gradients`: the Trainer's settings by default; 0/None: no clipping."""
        args = self.context.args
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
        return self.context.precision.clip_gradients(raw, value, algorithm, params)  # type: ignore[arg-type]

    # --------------------------------------------------------------- called by the loop
    def run(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any:
        if self.flops is not None:
            meter, self.flops = self.flops, None
            with meter.counting(batch):
                output = self.run(batch, batch_idx, size, last)
            if not meter.record(backward_ran=True):
                self.flops = meter
            return output
        context = self.context
        state = context.state
        steps_before = state.global_step
        self.steps_in_batch = 0
        self.stepped_in_batch.clear()
        self.inside = True
        try:
            with context.precision.autocast():
                output = context.train_step(batch, batch_idx)
        finally:
            self.inside = False
        context.precision.update()  # what is still pending (AMP: a step or an unscale since the last update)
        self.steps_in_batch = 0
        state.batches_done = batch_idx + 1
        context.output.progress_advance(batch)
        if state.global_step != steps_before:
            if self.want_step_end:
                context.call("on_train_step_end", True)
            n = context.args.log_every_n_steps
            if state.global_step // n != steps_before // n:
                context.output.log_step(_loss_of(output), None)
            else:
                kept = _loss_of(output)
                if kept is not None and context.args.compile:  # CUDA graphs reuse an output's memory
                    kept = kept.clone()
                context.output.step_done(kept, state.epoch, state.global_step)
        return output

    def batch_end_outputs(self, output: Any) -> Any:
        """What `on_train_batch_end` receives, as in Lightning's manual optimization: a
        returned dict (copied), `{"loss": tensor}` for a returned tensor, `{}` for None."""
        if isinstance(output, Mapping):
            return dict(output)
        return {"loss": output} if isinstance(output, torch.Tensor) else {} if output is None else output

    def end_window(self, batches_done: int) -> None:
        self.context.state.batches_done = batches_done

    @property
    def device_type(self) -> str:
        return self.context.strategy.device.type

    def cut_problem(self) -> str | None:
        if self.steps_in_batch:
            return (
                f"it was requested inside training_step after {self.steps_in_batch} of the batch's "
                "optimizer steps (manual optimization); resuming would repeat them"
            )
        return None if self.inside else self.open_window()  # inside: the batch is taken (cut_problem says so)

    def open_window(self) -> str | None:
        """Whether gradients in `.grad` are a manual accumulation that has not stepped yet.

        Gradients left over after the module's own `opt.step()` are not (Lightning's
        `opt.zero_grad()` before `manual_backward` leaves them until the next batch). An
        optimizer is accumulating when it holds gradients and either a `manual_backward`
        ran after the last step of any optimizer, or a backward changed its gradients since
        its own last step and it did not step in the last training_step (a discriminator
        accumulating over batches while the generator steps every batch).
        """
        for index, opt in enumerate(self.optimizers):
            params = _params(opt)
            if not any(p.grad is not None for p in params):
                continue
            changed = not _unchanged(self.marks.get(id(opt)), params)
            if self.backward_after_step or (changed and id(opt) not in self.stepped_in_batch):
                which = f"optimizer {index}" if len(self.optimizers) > 1 else "the optimizer"
                return (
                    f"it was requested inside a manual accumulation window ({which} holds gradients "
                    "from manual_backward calls since its last opt.step(), and that step has not run)"
                )
        return None


class _ModuleBackward:
    """What the strategy's manual_backward calls `backward` on: the module's override."""

    def __init__(self, hook: Callable[..., None]) -> None:
        self.backward = hook


def _recast_after_step(device_type: str) -> None:
    """After an in-place step inside autocast, a later forward in the same training_step must
    cast the updated weights, not reuse the casts autocast cached before the step (PyTorch's
    recipe has an autocast around each forward, and each one's exit clears the cache)."""
    if torch.is_autocast_enabled(device_type):
        torch.clear_autocast_cache()


def _params(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _grad_mark(p: torch.Tensor) -> tuple[weakref.ref[torch.Tensor], int] | None:
    """Which gradient tensor `p` holds and its version: a backward that accumulates into it
    bumps the version, one that creates it changes the tensor (a weak reference, not an id,
    which a new tensor could reuse)."""
    grad = p.grad
    return None if grad is None else (weakref.ref(grad), grad._version)


def _unchanged(marks: list[Any] | None, params: list[torch.nn.Parameter]) -> bool:
    if marks is None or len(marks) != len(params):
        return False
    for mark, p in zip(marks, params):
        grad = p.grad
        if mark is None or grad is None:
            if mark is not grad:
                return False
        elif mark[0]() is not grad or mark[1] != grad._version:
            return False
    return True


def _loss_of(output: Any) -> torch.Tensor | None:
    loss = output.get("loss") if isinstance(output, dict) else output
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss.detach().reshape(())
    return None
