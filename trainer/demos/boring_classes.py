"""The smallest complete module and data, as Lightning's demos define them (the same layers,
loss, optimizer, scheduler and data sizes), so a bug report or a test written with them trains
to the same weights here.

Example:
    >>> import torch
    >>> from trainer import Trainer
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = BoringModel()
    >>> Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
    >>> model.layer.weight.shape
    torch.Size([2, 32])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from trainer.datamodule import DataModule
from trainer.module import Module

__all__ = [
    "RandomDataset", "RandomDictDataset", "RandomIterableDataset", "RandomIterableDatasetWithLen", "BoringModel",
    "BoringDataModule", "ManualOptimBoringModel", "DemoModel",
]


class RandomDataset(Dataset):
    """`length` random vectors of `size`, drawn from torch's generator when made."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(RandomDataset):
    """As `RandomDataset`, each item a dict `{"a": x, "b": x + 2}`."""

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        item = self.data[index]
        return {"a": item, "b": item + 2}


class RandomIterableDataset(IterableDataset):
    """`count` random vectors of `size`, drawn while iterating; no `len()`."""

    def __init__(self, size: int, count: int) -> None:
        self.count, self.size = count, size

    def __iter__(self) -> Iterator[torch.Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """As `RandomIterableDataset`, with a `len()`."""

    def __len__(self) -> int:
        return self.count


class BoringModel(Module):
    """One `Linear(32, 2)` trained towards ones with MSE, SGD(lr=0.1) and StepLR(step_size=1);
    every stage has a loader of 64 random vectors (batch size 1). Override what a test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def loss(self, preds: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        return torch.nn.functional.mse_loss(preds, torch.ones_like(preds) if labels is None else labels)

    def step(self, batch: Any) -> torch.Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class BoringDataModule(DataModule):
    """256 random vectors split into four runs of 64: train, validation, test and predict."""

    random_train: Subset[torch.Tensor]
    random_val: Subset[torch.Tensor]
    random_test: Subset[torch.Tensor]
    random_predict: Subset[torch.Tensor]

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        parts = {"fit": ("random_train", 0), "validate": ("random_val", 1), "test": ("random_test", 2),
                 "predict": ("random_predict", 3)}
        wanted = ["fit", "validate"] if stage == "fit" else [stage]
        for name in wanted:
            attribute, index = parts[name]
            setattr(self, attribute, Subset(self.random_full, indices=range(64 * index, 64 * (index + 1))))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class ManualOptimBoringModel(BoringModel):
    """`BoringModel` with manual optimization: zero, backward, step in `training_step`."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class DemoModel(Module):
    """`relu(Linear(32, out_dim))` whose summed output is the loss; Adam."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)
