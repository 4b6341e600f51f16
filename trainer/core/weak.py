"""`WeakAttribute`: an attribute that refers to its value without keeping it alive.

The Trainer owns its helpers (the run's files, the loops) and each helper refers back to the
Trainer; with plain attributes that is a reference cycle, which only the cyclic garbage
collector frees, and everything the Trainer holds (the module, the optimizer: on a GPU, the
run's memory) waits for it. The helpers hold the Trainer through this descriptor instead, so
the last reference to the Trainer frees it at once.

Example:
    >>> class Owner: ...
    >>> class Helper:
    ...     owner: WeakAttribute[Owner] = WeakAttribute()
    ...     def __init__(self, owner: Owner) -> None:
    ...         self.owner = owner
    >>> owner = Owner(); helper = Helper(owner)
    >>> helper.owner is owner
    True
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

__all__ = ["WeakAttribute"]

T = TypeVar("T")


class WeakAttribute(Generic[T]):
    """A descriptor: `obj.name = value` keeps a weak reference; reading it after `value` is
    gone raises a RuntimeError (the owner outlived what it belongs to)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = f"_weak_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        ref = obj.__dict__.get(self.slot)
        value = ref() if ref is not None else None
        if value is None:
            raise RuntimeError(f"{type(obj).__name__}.{self.name}: the object it belonged to no longer exists.")
        return value  # type: ignore[no-any-return]

    def __set__(self, obj: Any, value: T) -> None:
        obj.__dict__[self.slot] = weakref.ref(value)
