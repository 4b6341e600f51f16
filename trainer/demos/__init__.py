"""Lightning's demo modules (`lightning.pytorch.demos`), for bug reports, examples and tests that
move over by their imports: `boring_classes` (`from trainer.demos.boring_classes import
BoringModel, RandomDataset`), `transformer` (`Transformer`, `WikiText2`, `LightningTransformer`),
`lstm` (`SimpleLSTM`, `SequenceSampler`, `LightningLSTM`) and `mnist_datamodule` (`MNIST`,
`MNISTDataModule`); `from trainer.demos import Transformer, WikiText2` as from Lightning's package."""

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
from trainer.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from trainer.demos.transformer import LightningTransformer, Transformer, WikiText2

__all__ = [
    "LightningLSTM", "SequenceSampler", "SimpleLSTM", "LightningTransformer", "Transformer", "WikiText2",
    "BoringModel", "BoringDataModule", "DemoModel", "ManualOptimBoringModel", "RandomDataset", "RandomDictDataset",
    "RandomIterableDataset", "RandomIterableDatasetWithLen",
]
