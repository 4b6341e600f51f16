"""Which hooks exist, and calling them: only on the callbacks whose class overrides a hook.

`trainer.Callback` (in `trainer/callback.py`, where the hooks are documented and typed with
the real `Trainer`) derives from `CallbackBase`, the little the loop needs of a callback:
its key and state in a checkpoint. The loop, the Trainer and the argument checks only ever
name `CallbackBase`, so none of them imports `trainer/callback.py`, and that file can name
the `Trainer` without an import cycle.

Example:
    >>> from trainer import Callback
    >>> from trainer.loops.hooks import Dispatcher
    >>> class Hello(Callback):
    ...     def on_fit_start(self, trainer, module):
    ...         print("hello")
    >>> dispatch = Dispatcher(None, [Hello()])
    >>> dispatch.wants("on_fit_start"), dispatch.wants("on_fit_end")
    (True, False)
    >>> dispatch.call("on_fit_start", None, None)
    hello
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

__all__ = ["HOOKS", "REMOVED_HOOKS", "REFUSED_HOOKS", "CallbackBase", "Dispatcher", "checkpoint_callbacks_last", "with_module_callbacks"]

log = logging.getLogger("trainer")

#: Every hook of `trainer.Callback`, in the order it defines them (tests/test_hooks.py checks).
HOOKS: tuple[str, ...] = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_start", "on_train_end", "on_exception", "on_train_epoch_start", "on_train_epoch_end",
    "on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "on_before_zero_grad", "on_train_step_end", "on_validation_start",
    "on_validation_end", "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_batch_start",
    "on_validation_batch_end", "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_test_batch_start", "on_test_batch_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start",
    "on_predict_epoch_end", "on_predict_batch_start", "on_predict_batch_end", "on_save_checkpoint",
    "on_load_checkpoint",
)
#: Hooks of Lightning 1 that Lightning 2 removed and calls no more (silently), with what to write instead.
REMOVED_HOOKS: dict[str, str] = {
    "on_epoch_start": "on_train_epoch_start (or on_validation_epoch_start, on_test_epoch_start)",
    "on_epoch_end": "on_train_epoch_end (or on_validation_epoch_end, on_test_epoch_end)",
    "on_batch_start": "on_train_batch_start", "on_batch_end": "on_train_batch_end",
    "on_pretrain_routine_start": "on_fit_start", "on_pretrain_routine_end": "on_train_start",
    "on_keyboard_interrupt": "on_exception", "on_init_start": "__init__", "on_init_end": "__init__",
}
#: Lightning 1's epoch-end hooks with outputs, which Lightning 2 refuses (and so does a stage
#: here, before any batch: `loops/batches.py` `check_module`), by the stage that would skip them.
REFUSED_HOOKS: dict[str, tuple[str, ...]] = {
    "fit": ("training_epoch_end", "validation_epoch_end"),
    "validate": ("validation_epoch_end",),
    "test": ("test_epoch_end",),
    "predict": (),
}
# Hooks whose module implementation runs before the callbacks' (everything else: callbacks
# first, as Lightning calls them). Epoch ends: see docs/hooks.md for why.
_MODULE_FIRST = frozenset({"on_load_checkpoint", "on_train_epoch_end"})


class CallbackBase:
    """What the loop needs of a callback: its key and its state in a checkpoint.

    Subclass `trainer.Callback` (which adds the hooks), never this class directly.
    """

    #: Writes checkpoints (`trainer.Checkpoint`, `ModelCheckpoint`): runs after the other
    #: callbacks, as in Lightning, so a file holds what they did in the same hook.
    saves_checkpoints: ClassVar[bool] = False
    #: Acts on monitored metrics (`EarlyStopping`; checkpoint callbacks too): in
    #: `on_train_epoch_end` it runs after the other callbacks, as in Lightning, so it sees
    #: what they logged there.
    monitors_metrics: ClassVar[bool] = False

    @property
    def state_key(self) -> str:
        """The key of this callback's state in a checkpoint (its class name by default)."""
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        """A `state_key` that tells instances apart by `kwargs`, in Lightning's format:
        ``f"{class name}{kwargs!r}"`` (``MyCallback{'what': 'epochs'}``)."""
        return f"{type(self).__qualname__}{kwargs!r}"

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


def checkpoint_callbacks_last(callbacks: Sequence[CallbackBase]) -> list[CallbackBase]:
    """`callbacks` with the ones that save checkpoints moved to the end, each group in its
    own order (Lightning's order: a checkpoint written in a hook holds what the others did)."""
    return [c for c in callbacks if not c.saves_checkpoints] + [c for c in callbacks if c.saves_checkpoints]


def with_module_callbacks(callbacks: Sequence[CallbackBase], module: Any) -> list[CallbackBase]:
    """`callbacks` with the module's `configure_callbacks()` added, Lightning's rule: each
    replaces the Trainer's callbacks of its class (or a base class of it); checkpoint ones last."""
    configure = getattr(module, "configure_callbacks", None)
    extra = configure() if callable(configure) else None
    if not extra:
        return list(callbacks)
    added: list[CallbackBase] = [extra] if isinstance(extra, CallbackBase) else list(extra)
    replaced = {
        type(mine) for mine in callbacks
        if not _is_plain_callback(mine) and any(issubclass(type(new), type(mine)) for new in added)
    }
    if replaced:
        log.info("The module's configure_callbacks replaces the Trainer's %s.",
                 ", ".join(sorted(cls.__name__ for cls in replaced)))
    kept = [c for c in callbacks if type(c) not in replaced and all(c is not new for new in added)]
    return checkpoint_callbacks_last(kept + added)


def _is_plain_callback(callback: CallbackBase) -> bool:
    """An instance of the `Callback` base class itself (it would match every class)."""
    return type(callback).__name__ == "Callback" and type(callback).__module__ == "trainer.callback"


# Lightning passes these hooks' stage by name (`setup(stage=...)`): a hook written
# `def setup(self, **kwargs)` or `def setup(self, stage=None)` reads it the same way here.
_STAGE_BY_NAME = frozenset({"setup", "teardown"})


# Hooks whose callbacks that act on monitored metrics run after the others (a stable sort, so
# each group keeps its order): Lightning's `on_train_epoch_end`.
_MONITORS_LAST = frozenset({"on_train_epoch_end"})


def _monitors(callback: CallbackBase) -> bool:
    return callback.monitors_metrics or callback.saves_checkpoints


class Dispatcher:
    """Calls a hook on the overriding callbacks and on the module (if it defines it)."""

    def __init__(self, module: Any, callbacks: Sequence[CallbackBase], timer: Any = None) -> None:
        self.callbacks = list(callbacks)
        self._targets: dict[str, list[Any]] = {}
        self._own: dict[str, list[bool]] = {}  # per target: a callback of this package (callbacks.*)
        for hook in HOOKS:
            ordered = sorted(self.callbacks, key=_monitors) if hook in _MONITORS_LAST else self.callbacks
            bound = [getattr(cb, hook) for cb in ordered if _overrides(cb, hook)]
            self._own[hook] = [_is_own(cb, hook) for cb in ordered if _overrides(cb, hook)]  # aligned with bound
            if timer is not None:  # profiler="simple": every call is timed (wrapped once, here)
                bound = [timer.wrap(fn, f"[Callback]{type(fn.__self__).__name__}.{hook}") for fn in bound]
            self._targets[hook] = bound
        _warn_removed_hooks([module, *self.callbacks])
        self._module_hooks: dict[str, Any] = {}
        from trainer.module import own_hook

        for hook in HOOKS:  # the module's own: of its class, or set on the instance (`model.on_fit_start = ...`)
            fn = own_hook(module, hook) if module is not None else None
            if fn is not None:
                self._module_hooks[hook] = fn if timer is None else timer.wrap(fn, f"[Module]{type(module).__name__}.{hook}")

    def call(self, hook: str, trainer: object, module: object, *args: Any) -> Any:
        """Call `hook` with `(trainer, module, *args)` on the callbacks, `(*args)` on the module;
        return what the module's returned (Lightning reads `on_train_batch_start`'s -1)."""
        if hook in _MODULE_FIRST:
            returned = self.call_module(hook, *args)
            self.call_callbacks(hook, trainer, module, *args)
        else:
            self.call_callbacks(hook, trainer, module, *args)
            returned = self.call_module(hook, *args)
        return returned

    def call_module(self, hook: str, *args: Any) -> Any:
        module_hook = self._module_hooks.get(hook)
        if module_hook is None:
            return None
        if hook in _STAGE_BY_NAME:
            return module_hook(stage=args[0])
        return module_hook(*args)

    def call_callbacks(self, hook: str, trainer: object, module: object, *args: Any) -> None:
        for fn in self._targets[hook]:
            if hook in _STAGE_BY_NAME:
                fn(trainer, module, stage=args[0])
            else:
                fn(trainer, module, *args)

    def wants(self, hook: str) -> bool:
        return bool(self._targets[hook]) or hook in self._module_hooks

    def wants_in_package(self, hook: str) -> bool:
        """Whether a callback of this package defines `hook`."""
        return any(self._own[hook])

    def wants_outside_package(self, hook: str) -> bool:
        """Whether the module or a callback not of this package defines `hook`."""
        return hook in self._module_hooks or not all(self._own[hook])

    def call_split(self, hook: str, trainer: object, module: object, *args: Any, own: bool) -> None:
        """`hook` on this package's callbacks only (`own=True`), or on the other callbacks and
        then the module (`own=False`): for a hook the package's callbacks use at another place."""
        for fn, is_own in zip(self._targets[hook], self._own[hook]):
            if is_own == own:
                fn(trainer, module, *args)
        if not own:
            self.call_module(hook, *args)

    def overriding(self, hook: str) -> list[CallbackBase]:
        """The callbacks whose class overrides `hook`."""
        return [cb for cb in self.callbacks if _overrides(cb, hook)]

    def module_defines(self, hook: str) -> bool:
        return hook in self._module_hooks


def _warn_removed_hooks(objects: Sequence[Any]) -> None:
    """A warning for each Lightning 1 hook a module or callback still defines: the run would
    silently never call it (as Lightning 2 does), so a notebook's images or metrics never appear."""
    for each in objects:
        for hook in REMOVED_HOOKS:
            if callable(getattr(type(each), hook, None)):
                warnings.warn(
                    f"{type(each).__name__} defines `{hook}`, a hook of Lightning 1 that Lightning 2 removed: it is never "
                    f"called, here as in Lightning 2. Expected {REMOVED_HOOKS[hook]}: rename the method.", UserWarning, stacklevel=4)


def _is_own(callback: CallbackBase, hook: str) -> bool:
    """Whether `hook` of the callback is this package's code (`callbacks.*`): a callback of the
    package, or a user's subclass of one that keeps the package's `hook`."""
    fn = getattr(type(callback), hook, None)
    return str(getattr(fn, "__module__", "")).split(".")[0] == "callbacks"


def _overrides(callback: CallbackBase, hook: str) -> bool:
    """Whether the callback overrides `hook` of `trainer.Callback` (whose defaults do nothing): in
    its class, or on the instance (`callback.on_fit_start = ...`)."""
    defaults = next(cls for cls in type(callback).__mro__ if CallbackBase in cls.__bases__)  # trainer.Callback
    own = getattr(callback, hook, None)
    return own is not None and getattr(own, "__func__", own) is not getattr(defaults, hook)
