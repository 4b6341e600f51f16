"""Giving each DDP rank its share of a DataLoader (a DistributedSampler that keeps the
loader's shuffle and drop_last)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["_with_distributed_sampler", "rebuild_loader"]

log = logging.getLogger("trainer")


def _with_distributed_sampler(loader: Any, rank: int, world_size: int, broadcast: Callable[[Any], Any]) -> Any:
    """`loader` rebuilt to read this rank's share of the data through a `DistributedSampler`.

    The shuffle (a `RandomSampler`) and `drop_last` are kept: `drop_last=True` drops the
    tail that does not divide evenly over the ranks, `drop_last=False` pads it by repeating
    the first samples, so every rank gets the same number of batches. The shuffle order
    comes from the sampler's seed (rank 0's `torch.initial_seed()`, which `Trainer(seed=...)`
    sets) and the epoch. A loader that already has a distributed sampler is left alone.
    """
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    if not isinstance(loader, DataLoader):
        warnings.warn(
            f"strategy='ddp': the loader is a {type(loader).__name__}, not a torch DataLoader, so it is "
            "used as is. Every rank must read its own share of the data and yield the same number of "
            "batches; otherwise ranks read the same data or wait on each other.",
            stacklevel=4,
        )
        return loader
    batch_sampler = loader.batch_sampler
    inner = batch_sampler.sampler if isinstance(batch_sampler, BatchSampler) else loader.sampler
    if isinstance(inner, DistributedSampler) or isinstance(loader.sampler, DistributedSampler):
        return loader
    if isinstance(loader.dataset, IterableDataset):
        warnings.warn(
            "strategy='ddp': the loader reads an IterableDataset, which a DistributedSampler cannot split, "
            "so it is used as is. Shard it per rank yourself (torch.distributed.get_rank()).",
            stacklevel=4,
        )
        return loader
    if batch_sampler is not None and type(batch_sampler) is not BatchSampler:
        raise ValueError(
            f"strategy='ddp' expected DataLoaders with batch_size (a default BatchSampler) or a "
            f"DistributedSampler. Received: a custom batch_sampler {type(batch_sampler).__name__}. "
            "Give it a DistributedSampler yourself; the Trainer then leaves the loader alone."
        )
    if type(inner) not in (RandomSampler, SequentialSampler) or (
        isinstance(inner, RandomSampler) and (inner.replacement or inner._num_samples is not None)
    ):
        raise ValueError(
            f"strategy='ddp' can only split loaders with shuffle=True/False or a DistributedSampler. "
            f"Received: sampler {type(inner).__name__}. Pass a DistributedSampler yourself (set its "
            "num_replicas/rank) and the Trainer leaves the loader alone."
        )
    drop_last = loader.batch_size is not None and loader.drop_last
    sampler: DistributedSampler[int] = DistributedSampler(
        loader.dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=isinstance(inner, RandomSampler),
        seed=int(broadcast(torch.initial_seed() % 2**62)),
        drop_last=drop_last,
    )
    if type(loader) is not DataLoader:
        log.warning("strategy='ddp': %s is rebuilt as a plain DataLoader with a DistributedSampler.", type(loader).__name__)
    return rebuild_loader(loader, sampler)


def rebuild_loader(loader: Any, sampler: Any) -> Any:
    """A plain `DataLoader` like `loader` (batch size, workers, collate, ...) reading through `sampler`."""
    from torch.utils.data import DataLoader

    options: dict[str, Any] = {
        "batch_size": loader.batch_size,
        "sampler": sampler,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "in_order"):
        options["in_order"] = loader.in_order
    return DataLoader(loader.dataset, **options)
