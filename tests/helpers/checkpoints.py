"""Shared pieces of the checkpoint tests: quiet Trainers, fresh process-like states, counting data."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from tests.helpers.reference import make_data, make_model
from trainer import Callback, Trainer


def trainer(root: Path, **kwargs: Any) -> Trainer:
    """A Trainer that writes checkpoints under `root` but no logs or bars."""
    base: dict[str, Any] = dict(logger=False, enable_progress_bar=False, device="cpu", root_dir=root)
    base.update(kwargs)
    return Trainer(**base)


def scramble_global_rng(seed: int = 12345) -> None:
    """Put every global RNG somewhere else, as a new process with other seeds would."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class CountingData(Dataset):
    """A map-style dataset that counts `__getitem__` calls (to prove skipped samples aren't loaded)."""

    def __init__(self, n: int = 37) -> None:
        self.data = make_data(n)
        self.calls = 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        self.calls += 1
        return self.data[index]


def shuffled(data: Any, batch_size: int = 4, generator: torch.Generator | None = None) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, shuffle=True, generator=generator)


class SaveAt(Callback):
    """Writes a checkpoint at the end of optimizer step `step` (a clean cut)."""

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def fresh_model(seed: int = 777, **kwargs: Any) -> Any:
    """Another instance with other initial weights: everything must come from the checkpoint."""
    return make_model(seed=seed, **kwargs)
