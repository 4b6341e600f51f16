"""`LambdaCallback`: a callback made of plain functions, for one-off behaviour."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from trainer import Callback
from trainer.callback import HOOKS

__all__ = ["LambdaCallback"]


class LambdaCallback(Callback):
    """A callback whose hooks are the functions you pass by hook name.

    Each function receives what the hook receives: `(trainer, module, ...)`. Unknown hook
    names and non-callables are rejected at construction, with the closest valid name.

    Args:
        **hooks: hook name -> function, e.g. ``on_train_epoch_end=fn``.

    Example:
        >>> import callbacks
        >>> seen = []
        >>> cb = callbacks.LambdaCallback(on_train_epoch_end=lambda trainer, module: seen.append(trainer.current_epoch))
        >>> sorted(cb.hooks)
        ['on_train_epoch_end']
    """

    def __new__(cls, **hooks: Callable[..., Any] | None) -> LambdaCallback:
        given = {name: fn for name, fn in hooks.items() if fn is not None}  # Lightning's: None is no hook
        for name, fn in hooks.items():
            if name not in HOOKS:
                close = difflib.get_close_matches(name, HOOKS, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"LambdaCallback({name}=...): unknown hook.{hint} Expected one of: {', '.join(HOOKS)}."
                )
            if fn is not None and not callable(fn):
                raise ValueError(
                    f"LambdaCallback({name}=...) expected a callable. Received: {fn!r} of type {type(fn).__name__}."
                )
        # The Trainer calls only hooks a callback's class overrides, so each instance gets
        # its own subclass holding exactly the hooks passed in.
        methods = {name: _as_method(fn) for name, fn in given.items()}
        subclass = type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__, "__qualname__": cls.__qualname__})
        return super().__new__(subclass)

    def __init__(self, **hooks: Callable[..., Any] | None) -> None:
        self.hooks: dict[str, Callable[..., Any]] = {name: fn for name, fn in hooks.items() if fn is not None}

    def __repr__(self) -> str:
        return f"LambdaCallback({', '.join(sorted(self.hooks))})"


def _as_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    method.__name__ = getattr(fn, "__name__", "hook")
    return method
