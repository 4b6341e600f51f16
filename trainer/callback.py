"""`Callback`: optional behaviour hooked into the loop, and the dispatcher that calls it.

Hooks are named `on_<scope>_<start|end>` and receive `(trainer, module, ...)`. The
dispatcher calls, for each hook, only the callbacks whose class overrides it, so a hook
nobody overrides costs one empty loop. The module's own hook of the same name (if it
has one) runs first.

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

__all__ = ["Callback", "HOOKS"]


class Callback:
    """Base class: override the hooks you need; the others cost nothing."""

    def on_fit_start(self, trainer: Any, module: Any) -> None: ...
    def on_fit_end(self, trainer: Any, module: Any) -> None: ...
    def on_train_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_train_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(
        self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...
    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None: ...
    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        """After an optimizer step and `zero_grad` (`stepped` is False for a skipped step)."""

    def on_validation_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_validation_batch_start(
        self, trainer: Any, module: Any, batch: Any, batch_idx: int
    ) -> None: ...
    def on_validation_batch_end(
        self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...
    def on_test_epoch_start(self, trainer: Any, module: Any) -> None: ...
    def on_test_epoch_end(self, trainer: Any, module: Any) -> None: ...
    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None: ...
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
    name for name in vars(Callback) if name.startswith("on_") and callable(vars(Callback)[name])
)


class _Dispatcher:
    """Calls a hook on the module (if it defines it) and then on the overriding callbacks."""

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
        self.call_module(hook, *args)
        self.call_callbacks(hook, trainer, module, *args)

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
