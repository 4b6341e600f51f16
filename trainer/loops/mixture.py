"""`Mixture`: training from several sources drawn by weight, resumable to the exact (source,
batch) sequence.

Each step draws a source from a seeded generator of its own (`torch.multinomial` over the
weights) and takes that source's next batch; a source that runs out starts again (a new
iterator, so a shuffling loader draws a new order). An epoch is `length` steps (by default the
sources' batches added up). The step receives `(source_name, batch)`. The Trainer adds each
source's samples so far to the epoch's metrics as `train/mixture/<name>_samples`.

A checkpoint holds the mixing generator's state, the samples counted and each source's pass
(as `CombinedLoader` does: the random state its iterator was made and first advanced with,
its own generators' states, the batches it gave), so a run resumed inside an epoch continues
the same sequence of sources and batches, and one resumed at an epoch's end the same draws.

Example:
    >>> from torch.utils.data import DataLoader
    >>> mixture = Mixture({"web": DataLoader(range(8), batch_size=2), "books": DataLoader(range(4), batch_size=2)},
    ...                   weights={"web": 0.5, "books": 0.5}, seed=1, length=6)
    >>> [name for name, batch in mixture_batches(mixture)], mixture.samples
    (['web', 'books', 'books', 'web', 'books', 'books'], {'web': 4, 'books': 8})
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from trainer.loops.combined import CombinedLoader, _length

__all__ = ["Mixture", "log_samples", "mixture_batches"]


class Mixture(CombinedLoader):
    """Several training sources, one drawn by weight for each step (see the module's docstring).

    Args:
        sources: a dict of loaders by name (or a list: named "0", "1", ...).
        weights: the sampling weight of each source (same keys or order); need not sum to 1.
        seed: the mixing generator's seed (the same sequence of sources on every rank).
        length: steps per epoch; by default the sources' batches added up.
    """

    def __init__(self, sources: Mapping[str, Any] | Sequence[Any], weights: Mapping[str, float] | Sequence[float],
                 seed: int = 0, length: int | None = None) -> None:
        names = [str(key) for key in sources] if isinstance(sources, Mapping) else [str(i) for i in range(len(sources))]
        loaders = list(sources.values()) if isinstance(sources, Mapping) else list(sources)
        given = [weights[name] for name in names] if isinstance(weights, Mapping) and set(weights) == set(names) else None
        if given is None and not isinstance(weights, Mapping) and len(weights) == len(loaders):
            given = list(weights)
        if not loaders or given is None or any(not isinstance(w, (int, float)) or w < 0 for w in given) or sum(given) <= 0:
            raise ValueError(
                f"Mixture expected one non-negative weight per source, not all zero, for sources {names}. "
                f"Received: weights={weights!r}. Pass weights with the sources' names (a dict) or in their order."
            )
        if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
            raise ValueError(f"Mixture(length=...) expected a positive int (steps per epoch) or None. Received: {length!r}.")
        if length is None and any(_length(loader) == float("inf") for loader in loaders):
            raise ValueError(f"Mixture expected length= (steps per epoch): a source of {names} has no len(), so the "
                             "sources' batches can't be added up. Received: length=None.")
        super().__init__(list(loaders), "max_size_cycle")
        self._mode = "mixture"
        self.names = names
        self.weights = torch.tensor([float(w) for w in given], dtype=torch.float64)
        self.generator = torch.Generator().manual_seed(seed)  # found by the Trainer's data order (epoch boundaries)
        self._length = length
        self.samples = dict.fromkeys(names, 0)  # per source, over the run

    @property
    def iterables(self) -> Any:
        """The sources by name (`trainer.train_dataloader`)."""
        return dict(zip(self.names, self.flattened))

    @property
    def epoch_length(self) -> int:
        if self._length is not None:
            return self._length
        total = sum(_length(loader) for loader in self.flattened)
        if total == float("inf"):
            raise TypeError("a Mixture of a source without a length needs length=")
        return int(total)

    def __len__(self) -> int:
        return self.epoch_length

    def draw(self) -> int:
        return int(torch.multinomial(self.weights, 1, generator=self.generator))

    def __next__(self) -> tuple[Any, int, int]:
        batch, index, source = super().__next__()
        self.samples[self.names[source]] += _samples(batch)
        return (self.names[source], batch), index, source

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "generator": self.generator.get_state(), "samples": dict(self.samples)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.generator.set_state(state["generator"])
        self.samples = dict(state["samples"])

    def load_state_between_epochs(self, state: dict[str, Any]) -> None:
        """A checkpoint written at an epoch's end: the next epoch starts afresh, with the counts and
        the mixing generator the run had."""
        self.generator.set_state(state["generator"])
        self.samples = dict(state["samples"])

    def __repr__(self) -> str:
        return f"Mixture({dict(zip(self.names, self.flattened))!r}, weights={self.weights.tolist()})"


def _samples(batch: Any) -> int:
    """Samples in a batch: dim 0 of its first tensor (1 when it has none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, (list, tuple)):
        return _samples(batch[0]) if batch else 1
    if isinstance(batch, Mapping):
        return _samples(next(iter(batch.values()))) if batch else 1
    return 1


def mixture_batches(mixture: Mixture) -> Iterator[Any]:
    """`(source_name, batch)` for each step of one epoch (what `fit` gives the step)."""
    for item, _, _ in mixture:
        yield item


def log_samples(metrics: Any, loader: Any) -> None:
    """At a training epoch's end: a Mixture's samples per source so far, as epoch metrics
    (`train/mixture/<name>_samples`); nothing for another loader."""
    if not isinstance(loader, Mixture):
        return
    for name, count in loader.samples.items():
        metrics.log(f"train/mixture/{name}_samples", float(count), on_step=False, on_epoch=True, prog_bar=False,
                    reduce="max", batch_size=None)
