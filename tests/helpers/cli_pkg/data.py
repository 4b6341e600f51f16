"""Data classes named by class_path in the config tests."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset


def make_tensors(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(n, 4, generator=generator)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


class RandomData:
    """A fixed synthetic 3-class problem; the train loader shuffles (the run's seed decides the order)."""

    def __init__(self, n: int = 32, batch_size: int = 8) -> None:
        self.data = TensorDataset(*make_tensors(n))
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.data.tensors[0]), batch_size=self.batch_size)


class TrainOnly:
    def __init__(self, batch_size: int = 8) -> None:
        self.data = TensorDataset(*make_tensors(16))
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size)


class TestOnly:
    def __init__(self, batch_size: int = 8) -> None:
        self.data = TensorDataset(*make_tensors(16))
        self.batch_size = batch_size

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=self.batch_size)


def make_data(n: int = 32, batch_size: int = 8) -> RandomData:
    return RandomData(n, batch_size)
