"""A PyTorch trainer whose numbers equal the hand-written loop.

Example:
    >>> from trainer import Trainer, Module, Callback
    >>> Trainer(precision="bf16", max_epochs=1, logger=False).precision
    BF16()
"""

from __future__ import annotations

from trainer.loops import early_signals

early_signals.install()  # first, before torch loads: inside SLURM, SIGUSR1 while the script starts waits for fit

import importlib
from typing import Any

from trainer.callback import Callback, MonitorError
from trainer.datamodule import DataModule
from trainer.logging.tensorboard import TensorBoardLogger
from trainer.module import Module
from trainer.precision import AMP, BF16, FP32, Precision
from trainer.trainer import Trainer
from trainer._utils import seed_everything
from trainer.checks import check_accumulation, check_resume

# Lightning's names, so a Lightning project moves over by its imports alone
# (`import trainer as L`: L.LightningModule, L.LightningDataModule, L.Trainer, L.Callback).
LightningModule = Module
LightningDataModule = DataModule

__all__ = [
    "Trainer", "Module", "DataModule", "Callback", "MonitorError", "TensorBoardLogger", "Precision", "FP32", "AMP", "BF16",
    "LightningModule", "LightningDataModule", "seed_everything", "check_resume", "check_accumulation",
    "cli_lightning_logo",
]
__version__ = "0.1.0"


def cli_lightning_logo() -> None:
    """Print the package's name and version between blank lines (what Lightning's example
    scripts call first, `from lightning.pytorch import cli_lightning_logo`, prints a logo)."""
    print(f"\ntrainer {__version__}\n")


#: subpackages a Lightning script reads as attributes (`pl.loggers.CSVLogger(...)` after `import
#: lightning.pytorch as pl`), loaded on first use so `import trainer` stays light
_LAZY = ("callbacks", "loggers", "strategies", "tuner", "utilities", "profilers", "plugins", "accelerators")


def __getattr__(name: str) -> Any:
    """`trainer.callbacks`, `trainer.loggers`, ... (Lightning's `L.callbacks`, `L.loggers` after
    `import trainer as L`): loaded on first use, so `import trainer` never loads the callbacks."""
    if name in _LAZY:
        return importlib.import_module(f"trainer.{name}")
    if name == "pytorch":  # `import lightning as L` then `L.pytorch.Trainer`, `L.pytorch.loggers.X`
        return importlib.import_module("trainer")
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
