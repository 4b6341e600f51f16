"""Small training pipelines for the self-checks (trainer.checks): one that resumes exactly and
three that are broken the ways users' pipelines break. Shared by tests/checks/ and
tests/helpers/scripts/check_resume_worker.py.

24 samples, batch 4: 6 batches per epoch, so with accumulate_grad_batches=2 an epoch has 3
windows, and 6 steps cover 2 epochs. The check's default stops land after epoch 1's first
window (requested inside it) and its second; the first batch after the first resume is
epoch 1, batch 2.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler

from trainer import Module

N, BATCH = 24, 4
FIRST_AFTER_RESUME = (1, 2)


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01)


class Data(Dataset):
    """`jitter="global"`: adds Python's `random.random()` in `__getitem__` (the Trainer saves that
    stream and DataLoader workers seed it: exact); `jitter="own"`: draws from a `random.Random`
    the dataset keeps, which no checkpoint holds."""

    def __init__(self, jitter: str | None = None, n: int = N) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 3, generator=g), torch.randn(n, 1, generator=g)
        self.jitter, self.rng = jitter, random.Random(0)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> Any:
        shift = {"global": random.random, "own": self.rng.random}.get(self.jitter or "", lambda: 0.0)()
        return self.x[index] + shift, self.y[index]


class ReshuffleOnIter(Sampler[int]):
    """A sampler that shuffles with Python's random each time its iterator is made."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = list(range(self.n))
        random.shuffle(order)
        return iter(order)


class Buckets:
    """A user's batch sampler over a DistributedSampler it keeps as `base`, where the Trainer's
    `set_epoch` does not reach it; it tells the sampler an epoch it counts itself, in memory."""

    def __init__(self, base: DistributedSampler[int], batch_size: int) -> None:
        self.base, self.batch_size, self.epoch = base, batch_size, 0

    def __len__(self) -> int:
        return len(self.base) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        self.base.set_epoch(self.epoch)
        self.epoch += 1
        order = list(self.base)
        return iter([order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)])


def loader(kind: str = "correct", num_workers: int = 0, rank: int = 0, world: int = 1) -> DataLoader:
    """correct | global_random | reshuffle | distributed_epoch | own_random; N samples per process."""
    options: dict[str, Any] = {"num_workers": num_workers}
    data = Data({"global_random": "global", "own_random": "own"}.get(kind), n=N * world)
    if kind in ("correct", "global_random", "own_random"):
        return DataLoader(data, batch_size=BATCH, shuffle=True, **options)
    if kind == "reshuffle":
        return DataLoader(data, batch_size=BATCH, sampler=ReshuffleOnIter(N), **options)
    if kind == "distributed_epoch":
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
        return DataLoader(data, batch_sampler=Buckets(sampler, BATCH), **options)
    raise ValueError(kind)


class PipelineData:
    """The pipelines above as a YAML experiment's data class (`trainer check-resume`)."""

    def __init__(self, kind: str = "correct", num_workers: int = 0) -> None:
        self.kind, self.num_workers = kind, num_workers

    def train_dataloader(self) -> DataLoader:
        return loader(self.kind, self.num_workers)
