"""Lightning's `lightning.pytorch.utilities.data`: the batch size a batch holds, and whether a
loader has a length (on every rank). `DataLoader` is torch's, also importable from here.

Example:
    >>> import torch
    >>> from trainer.utilities.data import extract_batch_size, has_len
    >>> extract_batch_size({"x": torch.zeros(8, 3), "y": torch.zeros(8)})
    8
    >>> has_len(range(3)), has_len(iter(range(3)))
    (True, False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from trainer.strategies.rank_zero import WarningCache, rank_zero_warn
from trainer.utilities.exceptions import MisconfigurationException

__all__ = ["DataLoader", "extract_batch_size", "has_len", "sized_len", "has_iterable_dataset", "has_len_all_ranks"]

_warnings = WarningCache()


def _sizes(batch: Any) -> Iterator[int | None]:
    if isinstance(batch, torch.Tensor):
        yield 1 if batch.ndim == 0 else batch.size(0)
    elif isinstance(batch, (Iterable, Mapping)) and not isinstance(batch, str):
        for item in batch.values() if isinstance(batch, Mapping) else batch:
            yield from _sizes(item)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for field in dataclasses.fields(batch):
            yield from _sizes(getattr(batch, field.name))
    else:
        yield None


def extract_batch_size(batch: Any) -> int:
    """The first dimension of the first tensor found in `batch` (dicts, lists, tuples and
    dataclasses are searched in order; a 0-d tensor counts 1), as Lightning infers it.

    Raises:
        MisconfigurationException: no tensor found; pass `self.log(..., batch_size=n)` instead.
    """
    message = ("Could not infer the batch size from the batch: no tensor found in it. Expected a tensor, or a dict, "
               "list, tuple or dataclass holding one; or pass it as self.log(..., batch_size=n).")
    found: int | None = None
    try:
        for size in _sizes(batch):
            if found is None:
                found = size
            elif size != found:
                _warnings.warn(f"The batch holds tensors of different first sizes; the batch size taken is {found}. "
                               "To be sure, pass self.log(..., batch_size=n).")
                break
    except RecursionError:
        raise RecursionError(message) from None
    if found is None:
        raise MisconfigurationException(message)
    return found


def sized_len(dataloader: object) -> int | None:
    """`len(dataloader)`, or None when it has none."""
    try:
        return len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def has_len(dataloader: object) -> bool:
    """Whether `len(dataloader)` works (a loader over an IterableDataset usually has none)."""
    return sized_len(dataloader) is not None


def has_iterable_dataset(dataloader: object) -> bool:
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def has_len_all_ranks(dataloader: object, strategy: Any, allow_zero_length_dataloader_with_multiple_devices: bool = False) -> bool:
    """`has_len` on every rank (the lengths summed through `strategy.reduce`), with Lightning's
    warnings for a total of zero batches.

    Raises:
        RuntimeError: this rank's loader is empty while others are not (unless allowed).
    """
    local = sized_len(dataloader)
    if local is None:
        return False
    total = int(strategy.reduce(torch.tensor(local), reduce_op="sum")) if strategy is not None else local
    name = type(dataloader).__name__
    if total == 0:
        rank_zero_warn(f"Total length of `{name}` across ranks is zero. Please make sure this was your intention.")
    elif local == 0:
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(f"`{name}` has zero length on this rank while other ranks have batches. Expected at least "
                               "one batch on every rank: give each rank a share of the data.")
        rank_zero_warn(f"`{name}` has zero length on this rank only. Please be cautious of uneven batch length.")
    return True
