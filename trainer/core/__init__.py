"""The Trainer's own pieces, each a concern of `trainer.Trainer` that its file would
otherwise hold: read-only properties (`properties.py`), where loaders come from
(`data.py`), fit from setup to teardown (`fit.py`), validate/test/predict (`evaluation.py`), Lightning's run flags such as
`deterministic` and `overfit_batches` (`flags.py`), `compile` (`compile.py`) and
activation checkpointing (`activation_checkpointing.py`). Nothing below the Trainer imports
them; the Trainer composes them. For scripts written against Lightning's paths,
`from trainer.core import LightningModule, LightningDataModule` gives `Module` and `DataModule`
(also at Lightning's module paths `trainer.core.module`, `trainer.core.datamodule`), and
`trainer.core.optimizer.LightningOptimizer` is the type of the optimizers hooks receive.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """Lightning's `lightning.pytorch.core` names for scripts that import them from there
    (`from trainer.core import LightningModule, LightningDataModule`), loaded on first use."""
    if name == "LightningModule":
        from trainer.module import Module

        return Module
    if name == "LightningDataModule":
        from trainer.datamodule import DataModule

        return DataModule
    raise AttributeError(f"module 'trainer.core' has no attribute {name!r}")
