"""Lightning's `lightning.pytorch.utilities.model_helpers.is_overridden`: whether a module,
DataModule or callback defines a hook of its own.

Example:
    >>> from trainer import Module
    >>> from trainer.utilities.model_helpers import is_overridden
    >>> class Net(Module):
    ...     def validation_step(self, batch, batch_idx): ...
    >>> is_overridden("validation_step", Net()), is_overridden("test_step", Net())
    (True, False)
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["is_overridden"]


def _code(method: Any) -> Any:
    while isinstance(method, functools.partial):
        method = method.func
    method = getattr(method, "__func__", method)  # a bound method: its function
    while hasattr(method, "__wrapped__"):  # functools.wraps: the function it wraps
        method = method.__wrapped__
    return getattr(method, "__code__", method)


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether `instance`'s `method_name` is not `parent`'s (by default the package's `Module`,
    `DataModule` or `Callback`, whichever `instance` is). False for None or a missing method.

    Raises:
        ValueError: `instance` is none of those and no `parent` is given, or `parent` lacks the method.
    """
    if instance is None:
        return False
    if parent is None:
        from trainer.callback import Callback
        from trainer.datamodule import DataModule
        from trainer.module import Module

        parent = next((base for base in (Module, DataModule, Callback) if isinstance(instance, base)), None)
        if parent is None:
            raise ValueError(
                f"is_overridden({method_name!r}, ...) got a {type(instance).__name__}, which is not a Module, "
                "DataModule or Callback. Pass the class it should be compared with: parent=TheBaseClass."
            )
    mine = getattr(instance, method_name, None)
    if mine is None:
        return False
    theirs = getattr(parent, method_name, None)
    if theirs is None:
        raise ValueError(f"is_overridden: {parent.__name__} has no method {method_name!r} to compare with. "
                         "Expected a hook name such as 'training_step' or 'on_train_epoch_end'.")
    return bool(_code(mine) != _code(theirs))
