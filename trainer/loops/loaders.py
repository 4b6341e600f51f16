"""Several loaders in one evaluation stage: a list, tuple or dict of them, run one after the other.

Lightning accepts a collection of loaders wherever it accepts one (`validate(model, [a, b])`,
a DataModule's `val_dataloader()` returning a dict, ...) and runs them in turn, telling the
hooks which one a batch came from (`dataloader_idx`). `EvalLoaders` is that collection: its
loaders in order, and the shape the user gave (`trainer.val_dataloaders` answers with it).
A collection of one loader is that loader, as before: nothing changes for a single loader. An
empty list or dict holds no loader: the stage runs nothing, as in Lightning (fit skips
validation, validate and test return an empty list and predict None, without calling a hook).

Example:
    >>> from torch.utils.data import DataLoader
    >>> a, b = DataLoader(range(4), batch_size=2), DataLoader(range(6), batch_size=2)
    >>> loaders = as_eval_loaders({"clean": a, "noisy": b})
    >>> len(loaders), loaders.keys, loaders.iterables["noisy"] is b
    (2, ['clean', 'noisy'], True)
    >>> as_eval_loaders([a]) is a
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

__all__ = ["EvalLoaders", "as_eval_loaders", "loaders_in", "loader_list", "no_loaders", "public_loaders"]


def _is_loader(item: Any) -> bool:
    """An object that is a loader itself: iterable, but not a batch-like collection or a tensor."""
    if isinstance(item, (list, tuple, Mapping, torch.Tensor, str, bytes)):
        return False
    return isinstance(item, Iterable)


def loaders_in(value: Any) -> list[Any] | None:
    """The loaders a list, tuple or dict holds (Lightning's several loaders), else None."""
    if isinstance(value, EvalLoaders):
        return list(value.loaders)
    if isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        items = list(value)
    else:
        return None
    return items if items and all(_is_loader(item) for item in items) else None


class EvalLoaders:
    """Evaluation loaders run one after the other, in the order given (Lightning's "sequential").

    Attributes:
        loaders: the loaders, in order (`dataloader_idx` is the position here).
        keys: the dict's keys, or the positions of a list or tuple.
    """

    def __init__(self, loaders: list[Any], keys: list[Any], kind: type) -> None:
        self.loaders = loaders
        self.keys = keys
        self._kind = kind

    @classmethod
    def of(cls, value: list[Any] | tuple[Any, ...] | Mapping[Any, Any]) -> EvalLoaders:
        if isinstance(value, Mapping):
            return cls(list(value.values()), list(value.keys()), dict)
        return cls(list(value), list(range(len(value))), type(value) if type(value) in (list, tuple) else list)

    def __len__(self) -> int:
        return len(self.loaders)

    def map(self, fn: Callable[[Any], Any]) -> EvalLoaders:
        """The same collection with `fn` applied to each loader (a sampler added, ...)."""
        return EvalLoaders([fn(loader) for loader in self.loaders], list(self.keys), self._kind)

    @property
    def iterables(self) -> Any:
        """The loaders in the shape they were given: a list, tuple or dict (`trainer.val_dataloaders`)."""
        if self._kind is dict:
            return dict(zip(self.keys, self.loaders))
        return self._kind(self.loaders)

    def __repr__(self) -> str:
        return f"EvalLoaders({self.iterables!r})"


def as_eval_loaders(value: Any) -> Any:
    """`value` as the evaluation loop runs it: one loader as is (a collection of one: that
    loader), several as `EvalLoaders`."""
    if isinstance(value, EvalLoaders):
        return value.loaders[0] if len(value) == 1 else value
    if getattr(value, "mode", None) == "sequential" and getattr(value, "combines_loaders", False):
        value = value.iterables  # Lightning's own way of reading several evaluation loaders
        if loaders_in(value) is None:
            return value
    if _empty_collection(value):  # no loaders at all: Lightning runs no evaluation (no hook, no batch)
        return EvalLoaders.of(value)
    items = loaders_in(value)
    if items is None:
        return value
    if len(items) == 1:
        return items[0]
    return EvalLoaders.of(value)


def _empty_collection(value: Any) -> bool:
    """An empty list, tuple or dict given where loaders go: no loader at all."""
    plain = isinstance(value, (list, tuple, Mapping)) and not hasattr(value, "_fields")
    return plain and len(value) == 0


def no_loaders(value: Any) -> bool:
    """Whether `value` (as `as_eval_loaders` made it) holds no loader: an empty list or dict was
    given, and the stage runs nothing (fit skips validation; validate/test return [], predict None)."""
    return isinstance(value, EvalLoaders) and len(value) == 0


def loader_list(value: Any) -> list[Any]:
    """The loaders of an evaluation: `[value]` for one loader."""
    return list(value.loaders) if isinstance(value, EvalLoaders) else [value]


def public_loaders(value: Any) -> Any:
    """What `trainer.val_dataloaders` and friends answer: one loader, or the given collection."""
    return value.iterables if isinstance(value, EvalLoaders) else value
