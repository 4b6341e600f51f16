"""Lightning's `CombinedLoader`: several loaders read together (or one after the other), and the
position of a combined epoch, so a run stopped inside one resumes exactly.

Modes (Lightning's): `min_size` stops with the shortest loader; `max_size_cycle` stops with the
longest, starting the shorter ones again when they run out; `max_size` stops with the longest,
giving None for the loaders already done; `sequential` reads each loader to its end, one after
the other. Iterating yields `(batch, batch_idx, dataloader_idx)` as Lightning's does, the batch
in the shape the loaders were given (`{"a": batch_a, "b": batch_b}` for a dict); `fit` trains on
the batch alone. `fit` combines a list or dict of training loaders with `max_size_cycle`.

The position: each loader's order is decided when its iterator is made (a DataLoader draws its
base seed from torch's generator) and first advanced (a shuffling sampler draws its seed). The
combined iterator records torch's random state at both moments of each loader's current pass,
the state of the generators the loader owns, and how many batches the pass gave. A checkpoint
holds that (`state_dict`); the resumed run makes each loader's iterator again from those states
and skips the batches already taken (by index, without loading them, for a single-process
DataLoader over a map-style dataset), so a loader started again mid-epoch (`max_size_cycle`)
gets the order the uninterrupted run gave it.

Example:
    >>> from torch.utils.data import DataLoader
    >>> loaders = {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}
    >>> combined = CombinedLoader(loaders, "max_size_cycle")
    >>> len(combined)
    3
    >>> [(sorted(batch), index) for batch, index, _ in combined]
    [(['a', 'b'], 0), (['a', 'b'], 1), (['a', 'b'], 2)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from trainer.loops.data_order import _skip_without_loading, loader_generators

__all__ = ["CombinedLoader", "MODES", "as_train_loader", "batches_of"]

MODES = ("min_size", "max_size_cycle", "max_size", "sequential")
_LENGTH: dict[str, Callable[[list[float]], float]] = {"min_size": min, "max_size_cycle": max, "max_size": max, "sequential": sum}


def _is_container(value: Any) -> bool:
    """A dict, list or tuple of loaders (not a container of numbers or strings, which is a leaf)."""
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        children = list(value)
    else:
        return False
    return not all(isinstance(child, (int, float, str)) for child in children)


def _flatten(value: Any) -> tuple[list[Any], Any]:
    """The leaves of a nested dict/list/tuple in order, and the shape to rebuild it."""
    if not _is_container(value):
        return [value], None
    keys = list(value.keys()) if isinstance(value, dict) else None
    leaves: list[Any] = []
    shapes = []
    for child in (value.values() if isinstance(value, dict) else value):
        flat, shape = _flatten(child)
        leaves += flat
        shapes.append((len(flat), shape))
    return leaves, (type(value), keys, shapes)


def _unflatten(leaves: list[Any], shape: Any) -> Any:
    if shape is None:
        return leaves[0]
    kind, keys, shapes = shape
    children, start = [], 0
    for count, child_shape in shapes:
        children.append(_unflatten(leaves[start:start + count], child_shape))
        start += count
    if keys is not None:
        return kind(zip(keys, children))
    return kind(children)


def _length(loader: Any) -> float:
    try:
        return float(len(loader))
    except TypeError:
        return float("inf")


class CombinedLoader:
    """Several loaders read as one, in one of Lightning's modes (see the module's docstring).

    Args:
        iterables: a loader, or a dict, list or tuple of loaders (nested too).
        mode: "min_size" (Lightning's default here), "max_size_cycle", "max_size" or "sequential".
    """

    #: What the Trainer looks for (without importing this class): each of `flattened` is a loader
    #: to prepare (a DistributedSampler, `set_epoch`), whose generators are part of the data order.
    combines_loaders = True

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}) is not a mode. Expected one of {', '.join(map(repr, MODES))}.")
        self._iterables = iterables
        self._flattened, self._shape = _flatten(iterables)
        self._mode = mode
        self._limits: list[int | float] | None = None
        self._iterator: _Position | None = None
        self._resume: dict[str, Any] | None = None

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def iterables(self) -> Any:
        """The loaders in the shape they were given."""
        return self._iterables

    @property
    def flattened(self) -> list[Any]:
        """The loaders in order (the Trainer replaces them with their prepared versions)."""
        return self._flattened

    @flattened.setter
    def flattened(self, loaders: list[Any]) -> None:
        if len(loaders) != len(self._flattened):
            raise ValueError(f"CombinedLoader.flattened expected {len(self._flattened)} loaders. Received: {len(loaders)}.")
        self._flattened = list(loaders)
        self._iterables = _unflatten(self._flattened, self._shape)

    @property
    def limits(self) -> list[int | float] | None:
        """The most batches to take from each loader (None: all)."""
        return self._limits

    @limits.setter
    def limits(self, limits: int | float | list[int | float] | None) -> None:
        if isinstance(limits, (int, float)):
            limits = [limits] * len(self._flattened)
        elif limits is not None and len(limits) != len(self._flattened):
            raise ValueError(f"CombinedLoader.limits expected {len(self._flattened)} limits. Received: {len(limits)}.")
        self._limits = limits

    @property
    def sampler(self) -> Any:
        return _unflatten([getattr(loader, "sampler", None) for loader in self._flattened], self._shape)

    @property
    def batch_sampler(self) -> Any:
        return _unflatten([getattr(loader, "batch_sampler", None) for loader in self._flattened], self._shape)

    def __iter__(self) -> CombinedLoader:
        resume, self._resume = self._resume, None
        self._iterator = _Position(self, resume)
        return self

    def __next__(self) -> tuple[Any, int, int]:
        if self._iterator is None:
            iter(self)
        assert self._iterator is not None
        leaves, index, loader_index = self._iterator.next()
        if self._mode in ("sequential", "mixture"):
            return leaves[0], index, loader_index
        return _unflatten(leaves, self._shape), index, loader_index

    def __len__(self) -> int:
        """Batches per pass, by the mode (Lightning's); a TypeError when a loader has no length."""
        lengths = [_length(loader) for loader in self._flattened]
        if self._limits is not None:
            lengths = [min(length, limit) for length, limit in zip(lengths, self._limits)]
        total = _LENGTH[self._mode](lengths)
        if total == float("inf"):
            raise TypeError("this CombinedLoader has a loader without a length")
        return int(total)

    def reset(self) -> None:
        self._iterator = None

    # ------------------------------------------------------------------ position
    def state_dict(self) -> dict[str, Any]:
        """The position of the current pass (see the module's docstring), for a checkpoint."""
        if self._iterator is None:
            return {"mode": self._mode, "index": 0, "loaders": [None] * len(self._flattened)}
        return self._iterator.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next `iter()` continues from `state` (written by `state_dict` for the same loaders)."""
        if state.get("mode") != self._mode or len(state.get("loaders") or []) != len(self._flattened):
            raise ValueError(
                f"CombinedLoader.load_state_dict expected the position of a {self._mode!r} CombinedLoader of "
                f"{len(self._flattened)} loaders. Received: one of mode {state.get('mode')!r} with "
                f"{len(state.get('loaders') or [])} loaders. Resume with the loaders the checkpoint was written with."
            )
        self._resume = state

    def __repr__(self) -> str:
        return f"CombinedLoader({self._iterables!r}, mode={self._mode!r})"


class _Pass:
    """One loader's current pass: its iterator and what decided its order."""

    __slots__ = ("iterator", "taken", "at_iter", "at_first", "generators", "done")

    def __init__(self) -> None:
        self.iterator: Iterator[Any] | None = None
        self.taken = 0
        self.at_iter: torch.Tensor | None = None
        self.at_first: torch.Tensor | None = None
        self.generators: dict[str, torch.Tensor] = {}
        self.done = False


class _Position:
    """The combined iterator: each loader's pass, the batch index and (sequential) the loader read."""

    def __init__(self, combined: CombinedLoader, resume: dict[str, Any] | None) -> None:
        self.loaders = combined.flattened
        self.mode = combined.mode
        self.limits = combined.limits
        self.passes = [_Pass() for _ in self.loaders]
        self.draw: Callable[[], int] | None = getattr(combined, "draw", None)  # a mixture's choice of source
        self.stop_at: int | None = getattr(combined, "epoch_length", None)
        self.index = 0
        self.current = 0  # sequential: the loader being read
        if resume is not None:
            self._resume(resume)
        elif self.mode == "mixture":
            pass  # a source's iterator is made when it is first drawn
        elif self.mode == "sequential":
            if self.loaders:
                self._open(0)
        else:
            for position in range(len(self.loaders)):
                self._open(position)

    def _open(self, position: int) -> None:
        record = self.passes[position]
        generators = loader_generators(self.loaders[position])
        record.at_iter, record.at_first = torch.get_rng_state(), None
        record.generators = {path: g.get_state() for path, g in generators.items()}
        record.taken, record.done = 0, False
        record.iterator = iter(self.loaders[position])

    def _take(self, position: int) -> Any:
        record = self.passes[position]
        assert record.iterator is not None
        if record.taken == 0 and record.at_first is None:
            record.at_first = torch.get_rng_state()
        batch = next(record.iterator)
        record.taken += 1
        return batch

    def next(self) -> tuple[list[Any], int, int]:
        if self.mode == "sequential":
            return self._next_sequential()
        if self.mode == "mixture":
            return self._next_drawn()
        out: list[Any] = [None] * len(self.loaders)
        if self.mode == "min_size":
            out = [self._take(position) for position in range(len(self.loaders))]
        elif self.mode == "max_size_cycle":
            for position in range(len(self.loaders)):
                try:
                    out[position] = self._take(position)
                except StopIteration:
                    self.passes[position].done = True
                    if all(record.done for record in self.passes):
                        raise
                    done = True  # a finished loader starts again, and stays counted as finished
                    self._open(position)
                    self.passes[position].done = done
                    out[position] = self._take(position)
        else:  # max_size
            for position in range(len(self.loaders)):
                try:
                    out[position] = self._take(position)
                except StopIteration:
                    self.passes[position].done = True
            if all(record.done for record in self.passes):
                raise StopIteration
        index = self.index
        self.index += 1
        return out, index, 0

    def _next_drawn(self) -> tuple[list[Any], int, int]:
        """A mixture's step: the next batch of a source drawn by weight (trainer/loops/mixture.py)."""
        draw = self.draw
        assert draw is not None
        if self.stop_at is not None and self.index >= self.stop_at:
            raise StopIteration
        position = draw()
        record = self.passes[position]
        if record.iterator is None:
            self._open(position)
        try:
            batch = self._take(position)
        except StopIteration:  # the source ran out: it starts again
            self._open(position)
            batch = self._take(position)
        index = self.index
        self.index += 1
        return [batch], index, position

    def _next_sequential(self) -> tuple[list[Any], int, int]:
        while self.current < len(self.loaders):
            limit = self.limits[self.current] if self.limits is not None else None
            if limit is None or self.index < limit:
                try:
                    batch = self._take(self.current)
                except StopIteration:
                    pass
                else:
                    index = self.index
                    self.index += 1
                    return [batch], index, self.current
            self.current += 1
            self.index = 0
            if self.current < len(self.loaders):
                self._open(self.current)
        raise StopIteration

    # ------------------------------------------------------------------ position
    def state_dict(self) -> dict[str, Any]:
        loaders = [
            None if record.iterator is None else
            {"at_iter": record.at_iter, "at_first": record.at_first, "generators": dict(record.generators),
             "taken": record.taken, "done": record.done}
            for record in self.passes
        ]
        return {"mode": self.mode, "index": self.index, "current": self.current, "loaders": loaders}

    def _resume(self, state: dict[str, Any]) -> None:
        """Make each loader's iterator again from the states its pass began with and skip what it gave."""
        self.index, self.current = int(state["index"]), int(state.get("current", 0))
        for position, saved in enumerate(state["loaders"]):
            if saved is None:
                continue
            loader, record = self.loaders[position], self.passes[position]
            generators = loader_generators(loader)
            for path, generator in generators.items():
                if path in saved["generators"]:
                    generator.set_state(saved["generators"][path])
            record.at_iter, record.generators = saved["at_iter"], dict(saved["generators"])
            torch.set_rng_state(saved["at_iter"])
            record.iterator = iter(loader)
            record.at_first, record.taken, record.done = saved["at_first"], int(saved["taken"]), bool(saved["done"])
            if record.taken:
                torch.set_rng_state(saved["at_first"])
                if not _skip_without_loading(loader, record.iterator, record.taken):
                    for _ in range(record.taken):
                        next(record.iterator)
            if record.done and self.mode == "max_size":  # it ran out: ask once more, as the run did
                for _ in record.iterator:
                    break


def as_train_loader(value: Any) -> Any:
    """What `fit` trains on: a list, tuple or dict of loaders combined as Lightning combines
    them (`max_size_cycle`); a `CombinedLoader` as is, but never `sequential` (Lightning's rule)."""
    from trainer.loops.loaders import loaders_in

    if isinstance(value, CombinedLoader):
        if value.mode == "sequential":
            raise ValueError(
                "fit() expected a CombinedLoader in mode 'min_size', 'max_size_cycle' or 'max_size' for training. "
                "Received: mode='sequential', which training does not support (Lightning's rule). Use one of "
                "those modes, or read the loaders one after the other in evaluation."
            )
        return value
    if loaders_in(value) is not None or _nested_loaders(value):  # one loader in a dict or list too: Lightning's batch is then a dict or list
        return CombinedLoader(value, "max_size_cycle")
    return value


def _nested_loaders(value: Any) -> bool:
    """Whether `value` is a dict, list or tuple of such collections whose innermost items are
    all loaders (Lightning's `{"a": [dl1, dl2], "b": [dl3, dl4]}`), which `fit` combines as it
    combines a flat one: the batch has the same nesting."""
    from trainer.loops.loaders import loaders_in

    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        items = list(value)
    else:
        return False
    return bool(items) and all(loaders_in([item]) is not None or _nested_loaders(item) for item in items)


def batches_of(items: Iterable[Any]) -> Iterator[Any]:
    """The batches of a `CombinedLoader`'s `(batch, batch_idx, dataloader_idx)` items (its
    iterator is made when the first batch is asked for)."""
    for batch, _, _ in items:
        yield batch
