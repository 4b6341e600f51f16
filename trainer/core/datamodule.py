"""Lightning's `lightning.pytorch.core.datamodule`: `LightningDataModule` is the package's `DataModule`."""

from __future__ import annotations

from trainer.datamodule import DataModule as LightningDataModule

__all__ = ["LightningDataModule"]
