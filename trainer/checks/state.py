"""What the checks put back: every random stream of the process, and the state a user's
loader objects keep in themselves (an epoch counter, a shuffled index list, a generator of
their own), so each run of a check starts as a new process would.

A new process builds its dataset, sampler and batch sampler afresh; within one process the
objects a run used carry what that run left in them. `LoaderState` records, before the first
run, the attributes of those objects (a dataset, its samplers, and the samplers and datasets
they hold, two levels deep) and puts them back before each later run. It also says which of
them a run changed: state the checkpoint does not hold, the likely cause of an inexact resume.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from trainer._utils import rng_state, set_rng_state

__all__ = ["RandomStreams", "LoaderState", "owned_objects", "scramble"]

#: Generators a user's object may own: their whole state is kept (by value).
_GENERATORS = (random.Random, np.random.RandomState, np.random.Generator)


class RandomStreams:
    """Every global random stream (Python, NumPy, torch CPU and each CUDA device), to put back."""

    def __init__(self) -> None:
        self.state = rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def restore(self) -> None:
        set_rng_state(self.state)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def scramble(seed: int) -> None:
    """Move every global stream somewhere else, as a new process with other seeds would be:
    what a resumed run does not get from its checkpoint then shows."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def owned_objects(loader: Any) -> Iterator[tuple[str, Any]]:
    """(path, object) for the objects of a loader that decide its order or its samples."""
    seen: set[int] = set()
    roots = [("dataset", getattr(loader, "dataset", None)), ("sampler", getattr(loader, "sampler", None)),
             ("batch_sampler", getattr(loader, "batch_sampler", None))]
    if not any(obj is not None for _, obj in roots):
        roots = [("loader", loader)]  # a plain iterable: its own attributes
    stack = [(path, obj, 0) for path, obj in reversed(roots)]
    while stack:
        path, obj, depth = stack.pop()
        if obj is None or id(obj) in seen or not hasattr(obj, "__dict__"):
            continue
        seen.add(id(obj))
        yield path, obj
        if depth >= 2:
            continue
        for name, value in list(vars(obj).items()):
            if isinstance(value, (Sampler, Dataset)) or _is_sampler_like(value):
                stack.append((f"{path}.{name}", value, depth + 1))


def _is_sampler_like(value: Any) -> bool:
    """A sampler that does not subclass torch's: an object with `__iter__` and `__len__` of a user's class."""
    kind = type(value)
    return (hasattr(kind, "__iter__") and hasattr(kind, "__len__") and kind.__module__ not in ("builtins",)
            and not isinstance(value, (torch.Tensor, np.ndarray, list, tuple, dict, set, str, bytes)))


def _kept(value: Any) -> Any:
    """A copy of an attribute's value that a run cannot change: generators by their state,
    containers one level deep, everything else by reference (large tensors are not copied)."""
    if isinstance(value, torch.Generator):
        return ("generator", value.get_state())
    if isinstance(value, _GENERATORS):
        return ("copy", copy.deepcopy(value))
    if isinstance(value, list):
        return ("list", list(value))
    if isinstance(value, dict):
        return ("dict", dict(value))
    if isinstance(value, set):
        return ("set", set(value))
    return ("value", value)


def _changed(value: Any, kept: tuple[str, Any]) -> bool:
    kind, saved = kept
    if kind == "generator":
        return not isinstance(value, torch.Generator) or not torch.equal(value.get_state(), saved)
    if kind == "copy":
        if isinstance(value, random.Random):
            return bool(value.getstate() != saved.getstate())
        if isinstance(value, np.random.RandomState):
            return not all(np.array_equal(a, b) for a, b in zip(value.get_state(), saved.get_state()))
        if isinstance(value, np.random.Generator):
            return bool(value.bit_generator.state != saved.bit_generator.state)
        return False
    if kind in ("list", "dict", "set"):
        try:
            return bool(value != saved)
        except Exception:  # noqa: BLE001 - elements that compare as arrays: judged by identity
            return any(a is not b for a, b in zip(value, saved)) or len(value) != len(saved)
    if isinstance(saved, (int, float, str, bool, type(None))):
        return bool(value != saved)
    return value is not saved


def _restore(obj: Any, name: str, value: Any, kept: tuple[str, Any]) -> None:
    kind, saved = kept
    if kind == "generator" and isinstance(value, torch.Generator):
        value.set_state(saved)  # the same object: a loader and its sampler may share it
    elif kind == "copy":
        object.__setattr__(obj, name, copy.deepcopy(saved))
    elif kind == "list" and isinstance(value, list):
        value[:] = saved  # in place: another object may hold the same list
    elif kind in ("dict", "set") and isinstance(value, (dict, set)):
        value.clear()
        value.update(saved)  # type: ignore[arg-type]
    elif value is not saved:
        object.__setattr__(obj, name, saved)


class LoaderState:
    """The attributes of a loader's dataset and samplers when the check started."""

    def __init__(self, loader: Any) -> None:
        self.entries: list[tuple[str, Any, dict[str, tuple[str, Any]]]] = []
        for path, obj in owned_objects(loader):
            if obj is loader and isinstance(obj, torch.utils.data.DataLoader):
                continue  # a DataLoader's own settings are fixed once it is made
            kept = {name: _kept(value) for name, value in vars(obj).items() if not name.startswith("__")}
            self.entries.append((path, obj, kept))
        self.generators = {id(g): (g, g.get_state()) for g in _loader_generators(loader)}

    def changed(self) -> list[str]:
        """`Class.attribute (path)` for each attribute a run changed since the check started."""
        found = []
        for path, obj, kept in self.entries:
            for name, saved in kept.items():
                if name in vars(obj) and _changed(vars(obj)[name], saved):
                    found.append(f"{type(obj).__name__}.{name} (the loader's {path})")
        return found

    def restore(self) -> None:
        for _, obj, kept in self.entries:
            for name, saved in kept.items():
                if name in vars(obj):
                    _restore(obj, name, vars(obj)[name], saved)
        for generator, state in self.generators.values():
            generator.set_state(state)


def _loader_generators(loader: Any) -> list[torch.Generator]:
    found = []
    for holder in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        generator = getattr(holder, "generator", None)
        if isinstance(generator, torch.Generator):
            found.append(generator)
    return found
