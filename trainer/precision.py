"""Precision strategies: how a step is autocast, backpropagated, unscaled, clipped and applied.

The base `Precision` is a complete null object (full fp32, nothing scaled). `AMP` adds
float16 autocast and a `torch.amp.GradScaler`; `BF16` adds bfloat16 autocast only.
The AMP order (scale -> backward -> unscale -> clip -> step -> update) lives here and
nowhere else: `clip_gradients` and `gradient_norm` unscale first, so the order cannot be
forgotten, and `optimizer_step` says whether the optimizer really stepped.

Example:
    >>> import torch
    >>> from trainer.precision import AMP
    >>> amp = AMP()
    >>> amp.setup(torch.device("cpu"))
    >>> float(amp.scaler.get_scale())
    65536.0
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import torch

__all__ = ["Precision", "FP32", "AMP", "BF16", "PRECISIONS", "resolve_precision"]

ClipAlgorithm = Literal["norm", "value"]
_NO_AUTOCAST = contextlib.nullcontext()  # stateless, so one shared instance serves every step


def _grads(parameters: Iterable[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.grad for p in parameters if p.grad is not None]


def _parameters(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm over all gradients, as `clip_grad_norm_` computes it (no host sync).

    Sparse gradients (``nn.Embedding(sparse=True)``) count by their coalesced values, so
    logging the norm never stops a model that trains in a hand-written loop.
    """
    if any(g.is_sparse for g in grads):
        grads = [g.coalesce()._values() if g.is_sparse else g for g in grads]
    if hasattr(torch.nn.utils, "get_total_norm"):  # torch >= 2.6
        return _whole(torch.nn.utils.get_total_norm(grads))
    if not grads:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def _whole(norm: torch.Tensor) -> torch.Tensor:
    """A norm over sharded gradients (FSDP's DTensors) is partial on each rank: the global
    norm is its full tensor (one all-reduce; every rank computes it)."""
    full = getattr(norm, "full_tensor", None)
    return full() if callable(full) else norm


class Precision:
    """Full float32: the null strategy every other one refines.

    Subclass it to plug in a strategy of your own and pass the instance as
    `Trainer(precision=MyPrecision())`.
    """

    name: str = "fp32"
    #: Lightning's name of this precision, so a project's checks of Lightning's string run
    #: (`trainer.precision == <that name>`, `"mixed" in trainer.precision`); the names are set with
    #: Lightning's other spellings, in trainer/lightning/arguments.py. None: our `name` stands in.
    lightning_name: str | None = None
    #: True when the strategy itself skips steps whose gradients are not finite
    #: (AMP's GradScaler); otherwise the Trainer guards against non-finite losses.
    handles_nonfinite: bool = False

    def setup(self, device: torch.device) -> None:
        """Bind the strategy to the device the model lives on (called by `fit`)."""
        self.device = device

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context the forward pass and loss run in."""
        return _NO_AUTOCAST

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """`loss.backward(*args, **kwargs)` (e.g. `retain_graph=True` from manual_backward)."""
        loss.backward(*args, **kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients to their true scale (a no-op unless the loss was scaled)."""

    def gradient_norm(
        self, optimizer: torch.optim.Optimizer, parameters: Sequence[torch.nn.Parameter] | None = None
    ) -> torch.Tensor:
        """The true total 2-norm of the gradients, as a device tensor (no host sync).

        `parameters` fixes the summation order (the Trainer passes the module's
        `parameters()` order, as a hand-written `clip_grad_norm_(model.parameters())` uses);
        by default the optimizer's own order.
        """
        self.unscale_gradients(optimizer)
        return _total_norm(_grads(parameters if parameters is not None else _parameters(optimizer)))

    def clip_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        max_value: float,
        algorithm: ClipAlgorithm,
        parameters: Sequence[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor | None:
        """Unscale, then clip. Returns the total norm before clipping for "norm"."""
        self.unscale_gradients(optimizer)
        params = list(parameters) if parameters is not None else _parameters(optimizer)
        if algorithm == "norm":
            return _whole(torch.nn.utils.clip_grad_norm_(params, max_value))
        torch.nn.utils.clip_grad_value_(params, max_value)
        return None

    def optimizer_step(self, optimizer: torch.optim.Optimizer, *, update: bool = True, defer_skips: bool = False,
                       closure: Callable[[], Any] | None = None) -> bool:
        """Apply the gradients; return whether the optimizer really stepped.

        With `update=False` (manual optimization) the strategy's bookkeeping after a step
        stays pending until `update()` or the next `backward` (see AMP). With `defer_skips`
        a step the optimizer may skip on the device (AMP with a fused optimizer) returns True
        without a host read, and `take_device_skips` counts such skips later. `closure` goes
        to an optimizer that evaluates the loss itself (LBFGS).
        """
        if closure is not None:
            optimizer.step(closure)
        else:
            optimizer.step()
        return True

    def take_device_skips(self) -> torch.Tensor | None:
        """The device-side count of steps skipped since the last call (`defer_skips=True`
        steps), then reset; None when there is none to read."""
        return None

    def update(self) -> None:
        """Settle what is pending since the last update: steps taken with `update=False` and
        unscales without a step (AMP: one `scaler.update()`; nothing when nothing is pending).
        Manual optimization calls it when `training_step` returns."""

    def loss_scale(self) -> torch.Tensor | None:
        """The current loss scale as a device tensor, or None when nothing is scaled."""
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (nothing for the base)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def precision(self) -> str:
        """Lightning's `trainer.precision_plugin.precision`: its name for this precision."""
        return self.lightning_name or self.name

    def __eq__(self, other: object) -> bool:
        """Equal to Lightning's name (`"16-mixed"` for AMP; our own is `.name`)."""
        if isinstance(other, str):
            return other == self.precision
        return self is other

    __hash__ = object.__hash__

    def __contains__(self, text: object) -> bool:
        """`"mixed" in trainer.precision`, as on Lightning's string."""
        return isinstance(text, str) and text in self.precision


class FP32(Precision):
    """Full float32 (the default)."""


class BF16(Precision):
    """bfloat16 autocast; gradients and weights stay float32, nothing is scaled.

    Args:
        autocast_cache: keep autocast's cache of low-precision weight copies inside a forward
            (PyTorch's default, what a hand-written loop gets). A weight used twice in one step
            then sums its two gradients in bfloat16; without the cache each use casts again and
            the sum is float32. Lightning turns it off, and so does its precision name here
            (trainer/lightning/arguments.py).
    """

    name = "bf16"

    def __init__(self, autocast_cache: bool = True) -> None:
        self.autocast_cache = autocast_cache

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=self.autocast_cache)

    def __repr__(self) -> str:
        return "BF16()" if self.autocast_cache else "BF16(autocast_cache=False)"


class AMP(Precision):
    """float16 autocast with a `torch.amp.GradScaler` on the model's device type.

    A step whose gradients are not finite is skipped and the scale backs off; the
    scaler's state (scale, growth tracker, factors) is part of `state_dict`.

    Args:
        init_scale, growth_factor, backoff_factor, growth_interval: GradScaler settings.
        autocast_cache: as for `BF16` (Lightning's precision name turns it off).
    """

    name = "amp"
    handles_nonfinite = True

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        autocast_cache: bool = True,
    ) -> None:
        self.autocast_cache = autocast_cache
        self._scaler_args = dict(
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
        )
        self.scaler: torch.amp.GradScaler | None = None
        #: The GradScaler class `setup` builds (FSDP sets one that agrees on skips over ranks).
        self.scaler_class: type[torch.amp.GradScaler] = torch.amp.GradScaler
        self.device_type: str | None = None
        self._steps_taken = 0
        # Weak: a new optimizer may reuse a freed one's id(), so ids can't mark "hooked".
        self._hooked: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        # Since the last scaler.update(): optimizers unscaled and not yet stepped (GradScaler
        # forbids a second unscale_), and optimizers stepped with update=False.
        self._unscaled: set[int] = set()
        self._stepped: set[int] = set()
        self._pending_state: dict[str, Any] | None = None
        self._device_skips: torch.Tensor | None = None  # defer_skips steps skipped, not yet read

    def setup(self, device: torch.device) -> None:
        super().setup(device)
        if self.scaler is None or self.device_type != device.type or type(self.scaler) is not self.scaler_class:
            if self.scaler is not None:  # moving devices keeps the scale and tracker
                self._pending_state = self.scaler.state_dict()
            self.device_type = device.type
            self.scaler = self.scaler_class(device.type, **self._scaler_args)  # type: ignore[arg-type]
            self._stepped.clear()  # a new scaler has nothing pending
            self._unscaled.clear()
            if self._pending_state is not None:
                self.scaler.load_state_dict(self._pending_state)
                self._pending_state = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=torch.float16, cache_enabled=self.autocast_cache)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        assert self.scaler is not None, "AMP.setup(device) must run before backward"
        if self._stepped:  # a step since the last update: update before scaling again (lazy update)
            self.update()
        self.scaler.scale(loss).backward(*args, **kwargs)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        assert self.scaler is not None
        if id(optimizer) in self._stepped:  # GradScaler forbids unscale_ after step() until update()
            self.update()
        if id(optimizer) not in self._unscaled:  # GradScaler forbids a second unscale_
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(self, optimizer: torch.optim.Optimizer, *, update: bool = True, defer_skips: bool = False,
                       closure: Callable[[], Any] | None = None) -> bool:
        scaler = self.scaler
        assert scaler is not None
        if closure is not None:
            raise ValueError(
                f"Trainer(precision='amp') can't step {type(optimizer).__name__} with a closure: it evaluates the "
                "loss itself (as LBFGS does), and a GradScaler can't scale those losses (PyTorch's GradScaler "
                "refuses closures). Expected precision='bf16' or 'fp32' for this optimizer."
            )
        if id(optimizer) in self._stepped:  # its second step since the last update (GradScaler forbids it)
            self.update()
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            # Fused optimizers (Adam/AdamW/SGD with fused=True) always run their step and
            # skip on the device; whether they skipped is the scaler's found_inf. Deferred (the
            # automatic loop), it is counted on the device and read at logging steps; otherwise
            # (manual optimization's `opt.stepped`) it is read here.
            _scaler_step(scaler, optimizer)
            found = list(scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values())
            if defer_skips:
                skipped = found[0].reshape(()) if len(found) == 1 else torch.stack([f.reshape(()).to(found[0].device) for f in found]).amax()
                skipped = (skipped > 0).float()
                self._device_skips = skipped if self._device_skips is None else self._device_skips + skipped
                stepped = True
            else:
                stepped = not any(bool(t.item()) for t in found)
        else:
            if optimizer not in self._hooked:
                # The post-hook fires only when optimizer.step() really runs, which is how we
                # learn that GradScaler did not skip it, without a host read of our own.
                optimizer.register_step_post_hook(self._count_step)
                self._hooked.add(optimizer)
            before = self._steps_taken
            _scaler_step(scaler, optimizer)
            stepped = self._steps_taken != before
        self._unscaled.discard(id(optimizer))
        self._stepped.add(id(optimizer))
        if update:
            self.update()
        return stepped

    def update(self) -> None:
        """`scaler.update()` if an optimizer stepped or was unscaled since the last one (its
        inf checks decide the new scale); then every optimizer starts unscaled again.

        Called after each step (automatic optimization), and lazily in manual optimization:
        before the next backward that follows a step, before a second step or an unscale of
        an optimizer that already stepped, and when `training_step` returns.
        """
        assert self.scaler is not None
        if not (self._stepped or self._unscaled):
            return
        self.scaler.update()
        self._stepped.clear()
        self._unscaled.clear()

    def take_device_skips(self) -> torch.Tensor | None:
        skips, self._device_skips = self._device_skips, None
        return skips

    def _count_step(self, *_: Any) -> None:
        self._steps_taken += 1

    def loss_scale(self) -> torch.Tensor | None:
        assert self.scaler is not None
        # get_scale() would read the scale to the host; the device tensor is what we log.
        return self.scaler._scale

    def state_dict(self) -> dict[str, Any]:
        if self.scaler is None:
            return dict(self._pending_state or {})
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is None:
            self._pending_state = dict(state)
        else:
            self.scaler.load_state_dict(state)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self._scaler_args.items())
        return f"AMP({args})" if self.autocast_cache else f"AMP({args}, autocast_cache=False)"


def needs_closure(optimizer: Any) -> bool:
    """Whether `optimizer.step` requires a closure (LBFGS: it evaluates the loss itself)."""
    cls: Any = type(optimizer)
    return _step_requires_closure(cls)


@functools.lru_cache(maxsize=None)
def _step_requires_closure(cls: Any) -> bool:
    try:
        parameter = inspect.signature(getattr(cls, "step")).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


PRECISIONS: dict[str, type[Precision]] = {"fp32": FP32, "amp": AMP, "bf16": BF16}


def resolve_precision(precision: str | Precision) -> Precision:
    """Turn one of our names (`PRECISIONS`) or an instance into a strategy object: our
    `"bf16"` and `"amp"` are what a hand-written loop does (autocast's weight cache on;
    `"amp"` is float16 with a GradScaler on every device). Lightning's names are turned into
    objects before they come here (trainer/lightning/arguments.py)."""
    if isinstance(precision, Precision):
        return precision
    if isinstance(precision, str) and precision in PRECISIONS:
        return PRECISIONS[precision]()
    accepted = ", ".join(repr(name) for name in PRECISIONS)
    raise ValueError(
        f"Trainer(precision=...) expected one of {accepted} or a trainer.precision.Precision "
        f"instance. Received: {precision!r} of type {type(precision).__name__}."
    )


def _scaler_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> None:
    """`scaler.step(optimizer)`; an optimizer with no gradient at all, which GradScaler refuses
    with a bare "No inf checks were recorded", gets an error that says why it happens."""
    try:
        scaler.step(optimizer)
    except AssertionError as error:
        if "No inf checks were recorded" not in str(error):
            raise
        raise ValueError(
            f"Trainer(precision='amp') found no gradient to step in {type(optimizer).__name__}: every parameter's "
            ".grad is None at the optimizer step, so the GradScaler has nothing to check for infs. Expected the "
            "loss to reach the optimizer's parameters. If gradient hooks consume the gradients "
            "(register_post_accumulate_grad_hook stepping optimizers of their own, with configure_optimizers "
            "returning None), those steps would apply scaled gradients: return the optimizers from "
            "configure_optimizers and step them through self.optimizers() under manual optimization "
            "(docs/manual_optimization.md, \"Optimizer steps inside backward\"), or use precision='bf16'."
        ) from error
