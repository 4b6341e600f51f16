"""What the automatic loop needs for a module's Lightning overrides: the optimizer an
`optimizer_step` override receives, the checks made once per fit, and schedulers stepped
through `lr_scheduler_step`.

Example:
    >>> import torch
    >>> from trainer.loops.overrides import LoopOptimizer
    >>> sgd = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    >>> wrapped = LoopOptimizer(sgd, None)
    >>> wrapped.param_groups[0]["lr"], wrapped.optimizer is sgd
    (0.1, True)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from trainer.loops.batches import ordered_parameters
from trainer.loops.context import module_of, signals_of
from trainer.loops.optimizers import plateaus_last

__all__ = ["LoopOptimizer", "OverrideSteps", "check_overrides", "step_schedulers"]


class LoopOptimizer:
    """The optimizer a module's `optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)`
    receives (Lightning's `LightningOptimizer`): `step(closure=optimizer_closure)` runs the
    closure (the batch's training_step and backward), then the non-finite guard,
    `on_before_optimizer_step`, unscale, clip and the step through the Trainer's precision.
    Every other attribute (`param_groups`, `state`, `zero_grad`, ...) is the wrapped optimizer's.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, loop: Any) -> None:
        self.__dict__["optimizer"] = optimizer
        self.__dict__["_loop_ref"] = weakref.ref(loop) if loop is not None else None  # the loop holds this: no cycle

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Run `closure`, then the Trainer's step (see the class)."""
        ref = self.__dict__["_loop_ref"]
        loop = ref() if ref is not None else None
        if loop is None:
            raise RuntimeError("This optimizer's Trainer no longer exists: step it inside the module's optimizer_step.")
        if kwargs:
            raise TypeError(
                f"optimizer.step() in optimizer_step takes only closure=. Received also: {sorted(kwargs)}."
            )
        return loop.hooked_step(closure)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["optimizer"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.optimizer, name, value)

    def __repr__(self) -> str:
        return f"LoopOptimizer({self.optimizer!r})"


class OverrideSteps:
    """The part of `AutomaticOptimization` (automatic.py) that runs a window's end through the
    module's `optimizer_step` override, and `clip_gradients` from `configure_gradient_clipping`."""

    if TYPE_CHECKING:
        context: Any
        optimizer: torch.optim.Optimizer
        parameters: list[torch.nn.Parameter]
        step_hook: Callable[..., Any] | None
        proxy: LoopOptimizer | None
        hooked: dict[str, Any] | None
        held: Any
        window_loss: torch.Tensor | None
        device_guard: bool
        learning_windows: int

        def _micro_batch(self, batch: Any, batch_idx: int, size: int, last: bool) -> Any: ...
        def _hold(self, output: dict[str, Any], loss: torch.Tensor, batch_idx: int, synced: bool) -> None: ...
        def _apply(self, found_inf: torch.Tensor | None) -> tuple[torch.Tensor | None, bool]: ...
        def _settle(self, batches_done: int, stepped: bool, schedulers: bool) -> None: ...
        def _report(self, window_loss: torch.Tensor, norm: torch.Tensor | None, stepped: bool) -> None: ...
        def _nonfinite_loss(self, batches_done: int) -> None: ...

    def _hooked_end(self, batch: Any, batch_idx: int, size: int) -> Any:
        """A window's last micro-batch through the module's `optimizer_step` override."""
        context = self.context
        if self.held is not None:
            self._hold({}, torch.zeros(()), batch_idx, True)  # raises: item windows need no override
        hooked: dict[str, Any] = {
            "ran": False, "stepped": None, "output": None, "loss": None, "nonfinite": False, "batches_done": batch_idx + 1,
        }

        def optimizer_closure() -> torch.Tensor | None:
            if hooked["ran"]:
                raise RuntimeError(
                    "The optimizer_step closure ran twice for one batch. Expected it to run once (through "
                    "optimizer.step(closure=optimizer_closure)); optimizers that call their closure several "
                    "times (LBFGS) are not supported by the automatic loop: use manual optimization."
                )
            hooked["ran"] = True
            hooked["output"] = self._micro_batch(batch, batch_idx, size, True)
            context.output.progress_advance(batch)
            return hooked["loss"]  # type: ignore[no-any-return]

        self.hooked = hooked
        try:
            assert self.step_hook is not None and self.proxy is not None
            self.step_hook(context.state.epoch, batch_idx, self.proxy, optimizer_closure)
            if not hooked["ran"]:
                raise RuntimeError(
                    f"{type(module_of(context)).__name__}.optimizer_step did not run its optimizer_closure, so "
                    f"batch {batch_idx} was never trained on. Expected optimizer.step(closure=optimizer_closure) "
                    "(or optimizer_closure() itself when the step is skipped on purpose), as in Lightning."
                )
            if hooked["nonfinite"]:
                return hooked["output"]  # skipped and counted (nonfinite_loss='skip')
            window_loss, self.window_loss = self.window_loss, None
            if window_loss is None:  # every micro-batch was skipped (training_step returned None)
                context.state.batches_done = batch_idx + 1
                return hooked["output"]
            self.learning_windows += 1  # a loss was backpropagated: this window learned
            if hooked["stepped"] is None:  # the override skipped the step: Lightning still counts it
                norm, stepped, schedulers = None, True, True
                signals_of(context).in_critical = True
            else:
                norm, stepped = hooked["stepped"]
                schedulers = stepped
            self._settle(batch_idx + 1, stepped, schedulers)
        finally:
            self.hooked = None
            signals_of(context).exit_critical()
        self._report(window_loss, norm, stepped)
        return hooked["output"]

    def hooked_step(self, closure: Any) -> Any:
        """`LoopOptimizer.step(closure)` inside an `optimizer_step` override: the closure (the
        micro-batch), then the non-finite guard, clip and the step, as the loop's own window end."""
        hooked = self.hooked
        if hooked is None:
            raise RuntimeError(
                "optimizer.step() of the optimizer given to optimizer_step was called outside it. Expected it "
                "inside the module's optimizer_step only."
            )
        if hooked["stepped"] is not None or hooked["nonfinite"]:
            raise RuntimeError("optimizer.step() ran twice in one optimizer_step call. Expected one step per call.")
        result = closure() if closure is not None else None
        window_loss = self.window_loss
        if not hooked["ran"] or window_loss is None:
            return result
        context = self.context
        if self.device_guard:
            hooked["stepped"] = self._apply(context.strategy.max_over_ranks((~torch.isfinite(window_loss)).float()))
        elif (
            not context.precision.handles_nonfinite
            and context.args.nonfinite_loss != "off"
            and not context.strategy.all_finite(window_loss)
        ):
            hooked["nonfinite"] = True
            self.window_loss = None
            self._nonfinite_loss(hooked["batches_done"])
        else:
            hooked["stepped"] = self._apply(None)
        return result

    def clip_gradients(self, optimizer: Any, value: float | int | None, algorithm: str | None) -> None:
        """`Module.clip_gradients` in automatic optimization (from `configure_gradient_clipping`):
        Lightning's defaults and checks, then the precision's unscale and clip."""
        args = self.context.args
        if value is None:
            value = args.gradient_clip_val or 0.0
        elif args.gradient_clip_val is not None and args.gradient_clip_val != value:
            raise ValueError(
                f"Trainer(gradient_clip_val={args.gradient_clip_val!r}) and clip_gradients(gradient_clip_val="
                f"{value!r}) disagree. Expected only one of them (as in Lightning)."
            )
        if algorithm is None:
            algorithm = args.gradient_clip_algorithm or "norm"
        else:
            algorithm = algorithm.lower()
            if args.gradient_clip_val is not None and args.gradient_clip_algorithm != algorithm:
                raise ValueError(
                    f"Trainer(gradient_clip_algorithm={args.gradient_clip_algorithm!r}) and clip_gradients("
                    f"gradient_clip_algorithm={algorithm!r}) disagree. Expected only one of them (as in Lightning)."
                )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"clip_gradients(gradient_clip_val=...) expected an int or a float. Received: {value!r}.")
        if algorithm not in ("norm", "value"):
            raise ValueError(f"clip_gradients(gradient_clip_algorithm=...) expected 'norm' or 'value'. Received: {algorithm!r}.")
        if value <= 0:
            return
        raw: torch.optim.Optimizer = optimizer.optimizer if isinstance(optimizer, LoopOptimizer) else optimizer
        params = self.parameters if raw is self.optimizer else ordered_parameters(module_of(self.context), [raw])
        self.context.precision.clip_gradients(raw, float(value), algorithm, params)  # type: ignore[arg-type]



def check_overrides(
    module: Any, precision: Any, schedulers: Sequence[Any], backward_hook: Any, scheduler_hook: Any
) -> None:
    """Once per fit: what Lightning refuses at setup, and what this Trainer cannot do yet.

    A scheduler that is not one of torch's (`LRScheduler`, `ReduceLROnPlateau`), e.g. timm's,
    needs the module's `lr_scheduler_step` (Lightning's rule); a `backward` override needs a
    precision whose backward is the plain `loss.backward()` (fp32, bf16).
    """
    from trainer.precision import Precision

    name = type(module).__name__
    for config in schedulers:
        scheduler = config.scheduler
        torch_kinds = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        if scheduler_hook is None and not isinstance(scheduler, torch_kinds):
            raise ValueError(
                f"The LR scheduler {type(scheduler).__name__} does not follow PyTorch's LRScheduler API. Expected "
                f"{name} to override lr_scheduler_step(self, scheduler, metric) to step it (as Lightning requires), "
                "e.g. `scheduler.step(epoch=self.current_epoch)` for a timm scheduler."
            )
    if backward_hook is not None and type(precision).backward is not Precision.backward:
        raise ValueError(
            f"{name} overrides backward(), and precision {precision!r} scales the loss before its backward, which "
            "an override would bypass. Expected precision='fp32', 'bf16' or 'bf16-mixed' with a backward override, "
            "or no override."
        )


def step_schedulers(
    configs: Sequence[Any],
    interval: str,
    count: int,
    read_metric: Callable[[str], float | None],
    hook: Callable[[Any, Any], Any],
    monitored: bool | None = None,
) -> None:
    """Step the schedulers of `interval` due at `count` through the module's
    `lr_scheduler_step(scheduler, metric)`: `metric` is the monitored value of a
    ReduceLROnPlateau, None otherwise (Lightning's arguments), the ReduceLROnPlateaus last.
    `monitored` picks only those that read a metric (True) or only the others (False)."""
    for config in plateaus_last(configs):
        if config.interval != interval or count % config.frequency:
            continue
        if monitored is not None and monitored != (config.monitor is not None):
            continue
        if config.monitor is None:
            hook(config.scheduler, None)
            continue
        value = read_metric(config.monitor)
        if value is None:
            config.step(count, read_metric)  # the missing monitor's error (or warning, strict=False)
            continue
        hook(config.scheduler, value)
