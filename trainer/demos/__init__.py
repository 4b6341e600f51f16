"""Lightning's small demo classes (`lightning.pytorch.demos.boring_classes`), for bug reports,
examples and tests that move over by their imports: `from trainer.demos.boring_classes import
BoringModel, RandomDataset`."""

from __future__ import annotations

from trainer.demos.boring_classes import (
    BoringDataModule,
    BoringModel,
    DemoModel,
    ManualOptimBoringModel,
    RandomDataset,
    RandomDictDataset,
    RandomIterableDataset,
    RandomIterableDatasetWithLen,
)

__all__ = [
    "BoringModel", "BoringDataModule", "DemoModel", "ManualOptimBoringModel", "RandomDataset", "RandomDictDataset",
    "RandomIterableDataset", "RandomIterableDatasetWithLen",
]
