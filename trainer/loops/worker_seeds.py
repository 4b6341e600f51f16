"""Seeding DataLoader workers after `seed_everything(seed, workers=True)`, as Lightning does.

Without it, a worker process started by fork holds a copy of the parent's NumPy and `random`
states, so every worker draws the same "random" augmentations. With `workers=True`
(`PL_SEED_WORKERS=1`), each DataLoader the Trainer runs that has no `worker_init_fn` of its
own gets `pl_worker_init_function`, which seeds torch, `random` and NumPy in each worker from
the worker's torch seed, its id and the process's rank: distinct streams, repeated by a rerun
with the same seed, and the same numbers Lightning's workers draw.

Example:
    >>> import os
    >>> from torch.utils.data import DataLoader
    >>> loader = DataLoader(range(4), num_workers=0)
    >>> os.environ["PL_SEED_WORKERS"] = "1"
    >>> seed_workers(loader, rank=0)
    >>> loader.worker_init_fn.func.__name__
    'pl_worker_init_function'
    >>> del os.environ["PL_SEED_WORKERS"]
"""

from __future__ import annotations

import functools
import os
import random
from typing import Any

import torch

__all__ = ["pl_worker_init_function", "seed_workers"]

_MASK64 = (1 << 64) - 1


def _mixed_seeds(base_seed: int, worker_id: int, rank: int, count: int) -> list[int]:
    """`count` 64-bit seeds from (base seed, worker, rank): the three packed into one number,
    scrambled by MurmurHash3's 64-bit finalizer, then stepped by Knuth's MMIX linear
    congruential generator (Lightning's derivation, so the workers draw Lightning's numbers)."""
    value = (base_seed << 32) | (worker_id << 16) | rank
    for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        value ^= value >> 33
        value = (value * multiplier) & _MASK64
    value ^= value >> 33
    seeds = []
    for _ in range(count):
        value = (value * 6364136223846793005 + 1) & _MASK64
        seeds.append(value)
    return seeds


def pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """A DataLoader `worker_init_fn`: seed torch, `random` and NumPy in this worker from its
    torch seed (PyTorch's base seed plus `worker_id`), `worker_id` and the process's `rank`."""
    import numpy as np

    if rank is None:
        from trainer.strategies.rank_zero import rank_zero_only

        rank = int(getattr(rank_zero_only, "rank", 0))
    base_seed = torch.initial_seed() - worker_id  # PyTorch's base seed: all of its bits
    torch_seed, high, low, _ = _mixed_seeds(base_seed, worker_id, rank, count=4)
    torch.manual_seed(torch_seed)
    random.seed((high << 32) | low)
    np.random.seed(np.random.SeedSequence([base_seed, worker_id, rank]).generate_state(4))


def seed_workers(loader: Any, rank: int) -> None:
    """After `seed_everything(..., workers=True)`: give `loader` (each loader of a
    `CombinedLoader`) `pl_worker_init_function` for `rank`, unless it has a `worker_init_fn`."""
    if os.environ.get("PL_SEED_WORKERS", "0") in ("", "0"):
        return
    for one in getattr(loader, "flattened", None) or [loader]:
        if hasattr(one, "worker_init_fn") and one.worker_init_fn is None:
            one.worker_init_fn = functools.partial(pl_worker_init_function, rank=rank)
