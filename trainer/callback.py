"""`Callback`: optional behaviour hooked into the loop, and the dispatcher that calls it.

Hooks are named `on_<scope>_<start|end>` (plus `setup`/`teardown`) and receive
`(trainer, module, ...)`. The dispatcher calls, for each hook, only the callbacks whose
class overrides it, so a hook nobody overrides costs nothing. Callbacks run before the
module's hook of the same name, as in Lightning; the exceptions (epoch ends, loading a
checkpoint) are listed in docs/hooks.md.

Example:
    >>> from trainer import Callback
    >>> class PrintEpoch(Callback):
    ...     def on_train_epoch_end(self, trainer, module):
    ...         print("finished epoch", trainer.current_epoch)
    >>> PrintEpoch().state_dict()
    {}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Callback", "HOOKS", "MonitorError"]


class MonitorError(KeyError, ValueError):
    """A metric that a callback or scheduler monitors was never logged.

    Raised during `fit` (after `last.ckpt` was written, so the finished work is kept); the
    `trainer` command reports it as a clean error with exit code 2.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class Callback:
    """Base class: override the hooks you need; the others cost nothing.

    Every hook receives `(trainer, module, ...)`; the order in which the Trainer calls them
    is the table in docs/hooks.md (Lightning's order).
    """

    # ------------------------------------------------------------------ run lifecycle
    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        """Before `fit`/`validate`/`test`/`predict` starts (`stage` names which)."""

    def teardown(self, trainer: Any, module: Any, stage: str) -> None:
        """After it ended (also when it failed)."""

    def on_fit_start(self, trainer: Any, module: Any) -> None: ...
    def on_fit_end(self, trainer: Any, module: Any) -> None: ...
    def on_sanity_check_start(self, trainer: Any, module: Any) -> None:
        """Before the `num_sanity_val_steps` validation batches that precede training."""

    def on_sanity_check_end(self, trainer: Any, module: Any) -> None: ...
    def on_train_start(self, trainer: Any, module: Any) -> None: ...
    def on_train_end(self, trainer: Any, module: Any) -> None: ...
    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None: ...

    # ----------------------------------------------------------------------- training
    def on_train_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_train_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the batch; for a window's last micro-batch, after its optimizer step."""

    def on_before_backward(self, trainer: Any, module: Any, loss: Any) -> None: ...
    def on_after_backward(self, trainer: Any, module: Any) -> None: ...
    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        """Before unscaling and clipping (gradients are still scaled under amp)."""

    def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
        """After the optimizer step, before its gradients are cleared (automatic optimization)."""

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        """After an optimizer step and `zero_grad` (`stepped` is False for a skipped step)."""

    # --------------------------------------------------------------------- evaluation
    def on_validation_start(self, trainer: Any, module: Any) -> None: ...
    def on_validation_end(self, trainer: Any, module: Any) -> None: ...
    def on_validation_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_validation_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_validation_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_test_start(self, trainer: Any, module: Any) -> None: ...
    def on_test_end(self, trainer: Any, module: Any) -> None: ...
    def on_test_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_test_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_test_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_test_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_predict_start(self, trainer: Any, module: Any) -> None: ...
    def on_predict_end(self, trainer: Any, module: Any) -> None: ...
    def on_predict_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_predict_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_predict_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_predict_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None: ...

    # -------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        """Called with the checkpoint dict before it is written; may add entries."""

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        """Called with a loaded checkpoint dict before training resumes."""

    @property
    def state_key(self) -> str:
        """The key of this callback's state in a checkpoint (its class name by default)."""
        return type(self).__qualname__

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


HOOKS: tuple[str, ...] = tuple(
    name
    for name in vars(Callback)
    if (name.startswith("on_") or name in ("setup", "teardown")) and callable(vars(Callback)[name])
)
# Hooks whose module implementation runs before the callbacks' (everything else: callbacks
# first, as Lightning calls them). Epoch ends: see docs/hooks.md for why.
_MODULE_FIRST = frozenset({"on_load_checkpoint", "on_train_epoch_end"})


class _Dispatcher:
    """Calls a hook on the overriding callbacks and on the module (if it defines it)."""

    def __init__(self, module: Any, callbacks: Sequence[Callback]) -> None:
        self.callbacks = list(callbacks)
        self._targets: dict[str, list[Any]] = {}
        for hook in HOOKS:
            bound = [getattr(cb, hook) for cb in self.callbacks if _overrides(cb, hook)]
            self._targets[hook] = bound
        self._module_hooks: dict[str, Any] = {}
        for hook in HOOKS:
            module_hook = getattr(type(module), hook, None) if module is not None else None
            if module_hook is not None and module_hook is not getattr(_module_base(), hook, None):
                self._module_hooks[hook] = getattr(module, hook)

    def call(self, hook: str, trainer: Any, module: Any, *args: Any) -> None:
        if hook in _MODULE_FIRST:
            self.call_module(hook, *args)
            self.call_callbacks(hook, trainer, module, *args)
        else:
            self.call_callbacks(hook, trainer, module, *args)
            self.call_module(hook, *args)

    def call_module(self, hook: str, *args: Any) -> None:
        module_hook = self._module_hooks.get(hook)
        if module_hook is not None:
            module_hook(*args)

    def call_callbacks(self, hook: str, trainer: Any, module: Any, *args: Any) -> None:
        for fn in self._targets[hook]:
            fn(trainer, module, *args)

    def wants(self, hook: str) -> bool:
        return bool(self._targets[hook]) or hook in self._module_hooks


def _overrides(callback: Callback, hook: str) -> bool:
    return getattr(type(callback), hook) is not getattr(Callback, hook)


def _module_base() -> type:
    from trainer.module import Module

    return Module
