"""The registry of stateful parts a checkpoint is made of.

Each part is registered once, under the key it has in the checkpoint, with how its state is
saved and loaded; `collect_state` and `restore_state` (state.py) iterate the registry instead
of naming every entry twice. A new piece of state costs one `register` call.

- `per_rank`: every process's value is gathered into a list (random streams, data order);
  each rank restores the entry with its own number (or the last one).
- `optional`: a checkpoint may lack the entry (an older file, a run without that part): its
  `load` is then given None. A required entry that is missing is an error naming it
  (`check_layout` checks the core ones before anything loads).
- `restore_last`: restored after every other part (the random streams, so nothing a load
  does draws from them afterwards).
- `load=None`: a description of the run (its config, hyperparameters) that is saved, read
  by whoever needs it, and not restored.

Example:
    >>> counter = {"seen": 3}
    >>> parts = StateRegistry()
    >>> parts.register("counter", lambda: dict(counter), counter.update)
    >>> saved = parts.collect(gather=lambda value: [value])
    >>> saved
    {'counter': {'seen': 3}}
    >>> counter["seen"] = 0
    >>> parts.restore(saved, rank=0)
    >>> counter
    {'seen': 3}
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from trainer.checkpoint.format import CheckpointError

__all__ = ["Part", "Restoring", "StateRegistry"]


@dataclass(frozen=True)
class Part:
    """One stateful part: its checkpoint key and how it is saved and loaded."""

    key: str
    save: Callable[[], Any]
    """The part's state as plain data and tensors (None when the run has none)."""
    load: Callable[[Any], None] | None
    per_rank: bool = False
    optional: bool = False
    restore_last: bool = False


@dataclass(frozen=True)
class Restoring:
    """The checkpoint being restored, for parts whose load reads more than their own entry
    (the file's name for messages; a sharded folder's index)."""

    source: str
    checkpoint: dict[str, Any]


class StateRegistry:
    """The parts of a checkpoint, in the order they are restored."""

    def __init__(self) -> None:
        self._parts: dict[str, Part] = {}
        self.restoring = Restoring("The checkpoint", {})
        """While `restore` runs: the checkpoint it restores."""

    def register(
        self,
        key: str,
        save: Callable[[], Any],
        load: Callable[[Any], None] | None,
        *,
        per_rank: bool = False,
        optional: bool = False,
        restore_last: bool = False,
    ) -> None:
        """Add a part under `key`.

        Raises:
            ValueError: `key` is taken (two parts would overwrite each other's entry).
        """
        if key in self._parts:
            raise ValueError(
                f"A checkpoint part named {key!r} is already registered, so both would write the same "
                f"entry. Expected a key of its own; taken: {', '.join(self._parts)}."
            )
        self._parts[key] = Part(key, save, load, per_rank, optional, restore_last)

    def __contains__(self, key: object) -> bool:
        return key in self._parts

    def __iter__(self) -> Iterator[Part]:
        """The parts in restore order: as registered, the `restore_last` ones at the end."""
        parts = list(self._parts.values())
        return iter([p for p in parts if not p.restore_last] + [p for p in parts if p.restore_last])

    def collect(self, gather: Callable[[Any], list[Any]]) -> dict[str, Any]:
        """Every part's state by key; `gather` makes a per-rank part's list (every rank calls it)."""
        state: dict[str, Any] = {}
        for part in self._parts.values():
            value = part.save()
            state[part.key] = gather(value) if part.per_rank else value  # gather: every rank takes part
        return state

    def restore(
        self, checkpoint: dict[str, Any], rank: int, source: str = "The checkpoint", only: Collection[str] | None = None
    ) -> None:
        """Load every part from `checkpoint` (or the parts named in `only`), in restore order; a
        per-rank part loads the entry of `rank` (or the last one, when fewer processes wrote the file).

        Raises:
            CheckpointError: a required part's entry is missing (named, with `source`).
        """
        chosen = [p for p in self if p.load is not None and (only is None or p.key in only)]
        missing = [p.key for p in chosen if not p.optional and p.key not in checkpoint]
        if missing:
            raise CheckpointError(
                f"{source} has no {', '.join(map(repr, missing))} entry, which this run restores. Expected a "
                "full checkpoint written by Trainer.save_checkpoint."
            )
        self.restoring = Restoring(source, checkpoint)
        try:
            for part in chosen:
                assert part.load is not None
                value = checkpoint.get(part.key)
                if part.per_rank:
                    values = list(value or [None])
                    value = values[min(rank, len(values) - 1)]
                part.load(value)
        finally:
            self.restoring = Restoring("The checkpoint", {})

    def per_rank_counts(self, checkpoint: dict[str, Any]) -> dict[str, int]:
        """How many processes wrote each per-rank entry of `checkpoint`."""
        return {
            p.key: len(checkpoint[p.key]) for p in self if p.per_rank and isinstance(checkpoint.get(p.key), list)
        }
