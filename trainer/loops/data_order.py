"""Data order: what decides an epoch's batches, and how a resumed run gets back to them.

An epoch's order is decided when its iterator is created and first advanced: a torch
`DataLoader` draws its workers' base seed from the torch generator at `iter()`, a
shuffling `RandomSampler` draws its own seed at the first `next()`, and a hand-made
iterable may shuffle with Python's `random` or NumPy's. So `DataOrder` keeps, for the
epoch in progress, every global RNG state (Python, NumPy, torch, CUDA) and the state of
every `torch.Generator` the loader or its sampler owns, taken just before `iter()`.

Resuming `skip` batches into an epoch then goes, by loader kind:

* a loader with its own `state_dict`/`load_state_dict` (torchdata's
  `StatefulDataLoader`): its saved state is loaded and it positions itself;
* a `DataLoader` over a map-style dataset with `num_workers=0`: the epoch-start states
  are put back, the iterator is created, and the first `skip` batches of *indices* are
  drawn from its batch sampler without fetching a single sample;
* anything else (iterable datasets, worker processes, plain iterables): the same replay,
  but the first `skip` batches are loaded and discarded. With workers this keeps each
  worker's random stream exactly as in the uninterrupted run, which skipping would not.

Afterwards the RNG states of the moment the checkpoint was taken are put back, so the
replay leaves no trace. The iterator is wrapped to count the batches it hands out; a
checkpoint is a clean cut only when that count equals the batches of completed steps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from trainer._utils import rng_state, set_rng_state

__all__ = ["DataOrder", "loader_generators", "is_stateful_loader", "loader_batch_size", "rebatch_problem"]

log = logging.getLogger("trainer")

# Where a DataLoader keeps generators that decide its order (deduplicated by identity).
_GENERATOR_PATHS = (
    "generator",
    "sampler.generator",
    "batch_sampler.generator",
    "batch_sampler.sampler.generator",
)


def is_stateful_loader(loader: Any) -> bool:
    """True for loaders that save and restore their own position (StatefulDataLoader)."""
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def loader_batch_size(loader: Any) -> int | None:
    """The loader's `batch_size` (a `DataLoader` that batches by itself), or None."""
    size = getattr(loader, "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def rebatch_problem(loader: Any) -> str | None:
    """Why a position counted in batches of another size can't be converted to this
    loader's batches, or None when it can: a map-style `DataLoader` that batches by itself,
    whose sampler decides the sample order whatever the batch size (the epoch's replay
    draws the same order, then skips whole batches of the new size)."""
    if is_stateful_loader(loader):
        return f"a {type(loader).__name__} restores its own position, counted in its own batches"
    if not isinstance(loader, DataLoader) or loader_batch_size(loader) is None:
        return "the loader does not batch a sampler's indices by itself (a DataLoader with batch_size=)"
    if isinstance(loader.dataset, IterableDataset):
        return "an IterableDataset decides its own order (and with workers how the batches interleave)"
    return None


def loader_generators(loader: Any) -> dict[str, torch.Generator]:
    """The distinct `torch.Generator`s a loader and its samplers own, by attribute path (a
    `CombinedLoader`: those of each of its loaders, as `flattened[i].<path>`)."""
    found: dict[str, torch.Generator] = {}
    seen: set[int] = set()
    children = getattr(loader, "flattened", None)
    if isinstance(children, list) and getattr(loader, "combines_loaders", False):
        for index, child in enumerate(children):
            for path, generator in loader_generators(child).items():
                if id(generator) not in seen:
                    seen.add(id(generator))
                    found[f"flattened[{index}].{path}"] = generator
        mixing = getattr(loader, "generator", None)  # a Mixture's own generator
        if isinstance(mixing, torch.Generator):
            found["generator"] = mixing
        return found
    for path in _GENERATOR_PATHS:
        value: Any = loader
        for name in path.split("."):
            value = getattr(value, name, None)
            if value is None:
                break
        if isinstance(value, torch.Generator) and id(value) not in seen:
            seen.add(id(value))
            found[path] = value
    return found


def _skip_without_loading(loader: Any, iterator: Any, count: int) -> bool:
    """Advance a single-process DataLoader iterator by `count` batches of indices only.

    Returns False (nothing consumed) when the loader doesn't allow it.
    """
    single = getattr(torch.utils.data.dataloader, "_SingleProcessDataLoaderIter", None)
    if (
        single is None
        or type(iterator) is not single
        or not isinstance(loader, DataLoader)
        or isinstance(loader.dataset, IterableDataset)
        or not hasattr(iterator, "_sampler_iter")
    ):
        return False
    sampler_iter = iterator._sampler_iter
    for index in range(count):
        try:
            next(sampler_iter)  # the same index draws the original run made, no __getitem__
        except StopIteration:
            raise _too_short(count, index) from None
    iterator._num_yielded += count
    return True


class DataOrder:
    """Records each epoch's order-deciding state and positions resumed iterators.

    `yielded` counts the batches the current epoch's iterator has handed out; `epoch`
    is the epoch that iterator belongs to.
    """

    def __init__(self) -> None:
        self.epoch_start: dict[str, Any] | None = None
        self.loader: Any = None
        self.epoch: int | None = None
        self.yielded = 0
        self.fetching = False  # inside the loader's __next__ (an interrupt there is not a clean cut)
        self._pending: dict[str, Any] | None = None
        # An epoch's iterator opened ahead of its start hooks (Lightning opens the first one when
        # fit sets up its data): (loader, epoch, iterator), and the global random state at the
        # epoch's first batch, which a replay then needs beside the one before iter().
        self._opened: tuple[Any, int, Iterator[Any]] | None = None
        self.first_fetch: dict[str, Any] | None = None

    # ------------------------------------------------------------------ iterators
    def open_ahead(self, loader: Any, epoch: int) -> None:
        """Call iter() on a fresh epoch's loader now, as Lightning does when fit sets up its
        data (before `on_train_start`, and before `val_dataloader()` without a sanity check):
        the worker seed is drawn here, what the start hooks draw comes after it. Plain loaders
        only (a loader with its own state, or several combined, open at the epoch's start)."""
        self.discard_opened()
        if is_stateful_loader(loader) or getattr(loader, "combines_loaders", False):
            return
        generators = loader_generators(loader)
        self.epoch_start = {**rng_state(), "generators": {path: g.get_state() for path, g in generators.items()}}
        self.loader, self.epoch, self.yielded, self.first_fetch = loader, epoch, 0, None
        self._opened = (loader, epoch, iter(loader))

    def discard_opened(self) -> None:
        """Forget an iterator opened ahead that no epoch used (a fit that ended before it)."""
        self._opened = None

    def epoch_iterator(self, loader: Any, skip: int, epoch: int) -> Iterator[Any]:
        """An iterator over this epoch's batches, positioned after `skip` consumed ones."""
        opened, self._opened = self._opened, None
        if opened is not None and opened[0] is loader and opened[1] == epoch and skip == 0 and self._pending is None:
            self.yielded = 0
            return self._count(opened[2], record_first=True)
        pending, self._pending = self._pending, None
        self.loader, self.epoch, self.yielded, self.first_fetch = loader, epoch, skip, None
        if is_stateful_loader(loader):
            return self._count(self._stateful_iterator(loader, skip, pending))
        generators = loader_generators(loader)
        if skip == 0 and not (pending or {}).get("opened"):
            if pending is not None:  # an epoch-boundary checkpoint: continue its generators
                _set_generator_states(generators, pending.get("generators") or {})
            # every global stream: an iterable may decide its order with Python's or NumPy's
            self.epoch_start = {**rng_state(), "generators": {path: g.get_state() for path, g in generators.items()}}
            return self._count(iter(loader), record_first=True)  # every epoch: a checkpoint's layout stays the same
        start = pending.get("epoch_start") if pending is not None else self.epoch_start
        first = pending.get("first_fetch") if pending is not None else self.first_fetch
        if start is None:
            raise RuntimeError(
                f"Cannot resume {skip} batches into epoch {epoch}: the checkpoint has no record of "
                "the epoch's data order. Expected a checkpoint written by Trainer.save_checkpoint."
            )
        self.epoch_start = start
        current = rng_state()
        if "python" in start:
            set_rng_state(start)
        else:  # a checkpoint written before the epoch's start kept every stream: torch's only
            torch.set_rng_state(start["torch"])
        _set_generator_states(generators, start.get("generators") or {})
        try:
            iterator = iter(loader)
            if first is not None:  # opened ahead: the start hooks drew between iter() and the first batch
                set_rng_state(first)
            if skip and not _skip_without_loading(loader, iterator, skip):
                _consume(iterator, skip)
        finally:
            set_rng_state(current)
        self.epoch_start, self.first_fetch = start, first
        if skip == 0:  # resumed between the opening and the first batch: that batch's state is still to come
            return self._count(iterator, record_first=True)
        return self._count(iterator)

    def _stateful_iterator(self, loader: Any, skip: int, pending: dict[str, Any] | None) -> Iterator[Any]:
        self.epoch_start = None
        if skip == 0:
            # An epoch boundary: the uninterrupted run simply calls iter() for the new epoch.
            # Its saved state describes the finished epoch (which some loaders replay as an
            # empty one), so only the generators that decide the next order are restored.
            if pending is not None:
                _set_generator_states(loader_generators(loader), pending.get("generators") or {})
                between = getattr(loader, "load_state_between_epochs", None)  # a Mixture's sample counts
                if callable(between) and pending.get("loader") is not None:
                    between(pending["loader"])
            return iter(loader)
        saved = pending.get("loader") if pending is not None else None
        if saved is None:
            if skip:
                raise RuntimeError(
                    f"Cannot resume {skip} batches into the epoch: the checkpoint holds no state of "
                    f"the {type(loader).__name__}. Expected a checkpoint written with the same loader."
                )
            return iter(loader)
        current = rng_state() if skip else None
        loader.load_state_dict(saved)
        iterator = iter(loader)
        if current is not None:  # mid-epoch: whatever iter() drew belongs to the past
            set_rng_state(current)
        return iterator

    def _count(self, iterator: Iterator[Any], record_first: bool = False) -> Iterator[Any]:
        if record_first:  # the generator runs this at the first next(): the state the first batch draws from
            self.first_fetch = rng_state()
        while True:
            self.fetching = True  # stays True if an interrupt lands inside the loader
            try:
                item = next(iterator)
            except StopIteration:
                self.fetching = False
                return
            self.fetching = False
            self.yielded += 1
            yield item

    def finish_epoch(self, iterator: Iterator[Any]) -> None:
        """Ask the epoch's iterator for one batch past its last, as a `for` loop over it does.

        A run that stops on an epoch's last batch (max_steps, SIGTERM, a stop request) must
        leave the loader as the uninterrupted run does: a shuffling `RandomSampler` makes one
        more draw from its generator when it is exhausted, and a `StatefulDataLoader` only
        records a finished epoch once its iterator raised StopIteration.
        """
        for _ in iterator:  # a loader whose len() understates it: the next batch is dropped, as in the loop
            break

    def fresh_worker_iterator_warning(self, loader: Any) -> str | None:
        """Why resuming with this loader can't be exact, or None (persistent workers)."""
        if getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0 and not is_stateful_loader(loader):
            return (
                "the DataLoader keeps persistent_workers=True: the resumed process starts new workers, whose "
                "base seed is a new draw from torch's random generator (the uninterrupted run drew it once, in "
                "its first epoch), so random augmentation in the workers and later random numbers differ. For "
                "an exact resume use persistent_workers=False or torchdata's StatefulDataLoader"
            )
        return None

    # ------------------------------------------------------------------ checkpoint
    def unconsumed(self, epoch: int, batches_done: int) -> int:
        """Batches taken from the loader beyond the last completed step (0 at a clean cut)."""
        if self.epoch != epoch:
            return 0
        return max(self.yielded - batches_done, 0)

    def state_dict(self) -> dict[str, Any]:
        if self._pending is not None:  # restored but not yet used: pass it on unchanged
            return dict(self._pending)
        loader = self.loader
        state: dict[str, Any] = {"epoch_start": self.epoch_start, "generators": {}, "loader": None}
        if self.first_fetch is not None:
            state["first_fetch"] = self.first_fetch
        if self._opened is not None:  # written between the opening and the first batch
            state["opened"] = True
        if loader is None:
            return state
        state["batch_size"] = loader_batch_size(loader)  # the unit of the loop's batches_done
        if is_stateful_loader(loader):
            state["loader"] = loader.state_dict()
        state["generators"] = {path: g.get_state() for path, g in loader_generators(loader).items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Keep `state` for the next `epoch_iterator` call."""
        self._pending = dict(state)

    def settle(self, loader: Any) -> None:
        """A resumed fit with nothing left to train: the loader's generators take the checkpoint's
        states all the same, so what iterates it after training (StochasticWeightAveraging's
        BatchNorm pass, a user's on_train_end) draws what the uninterrupted run drew."""
        if self._pending is not None and loader is not None:
            _set_generator_states(loader_generators(loader), self._pending.get("generators") or {})

    def saved_batch_size(self) -> int | None:
        """The batch size of the restored (not yet used) state, if it recorded one."""
        size = (self._pending or {}).get("batch_size")
        return size if isinstance(size, int) and not isinstance(size, bool) else None

    def rebatched(self, batch_size: int) -> None:
        """The restored position was converted to batches of `batch_size`: say so in the
        state a checkpoint written before the epoch's iterator exists passes on."""
        if self._pending is not None:
            self._pending["batch_size"] = batch_size


def _set_generator_states(generators: dict[str, torch.Generator], states: dict[str, torch.Tensor]) -> None:
    missing = sorted(set(states) - set(generators))
    if missing:
        log.warning(
            "The checkpoint holds the state of loader generator(s) %s, which the current loader "
            "does not have; its order may differ from the interrupted run.", ", ".join(missing)
        )
    for path, generator in generators.items():
        if path in states:
            generator.set_state(states[path])


def _consume(iterator: Iterator[Any], count: int) -> None:
    for index in range(count):
        try:
            next(iterator)
        except StopIteration:
            raise _too_short(count, index) from None


def _too_short(count: int, available: int) -> RuntimeError:
    return RuntimeError(
        f"Cannot resume after {count} batches of the epoch: the loader now yields only {available}. "
        "Expected the same loader (dataset, batch_size, drop_last) as the interrupted run."
    )
