"""The loggers' public home: `from trainer.loggers import TensorBoardLogger, CSVLogger, ...`.

They live in `trainer/logging/` with the rest of what a run writes: `TensorBoardLogger`
(the default) in `tensorboard.py`, `CSVLogger` in `csv.py`, `WandbLogger` in `wandb.py` and
`MLflowLogger` in `mlflow.py` (these two need their library: `pip install 'loopwright[wandb]'`,
`'loopwright[mlflow]'`, imported only when their run starts), `LoggerList` (`logger=[...]`)
in `multi.py`.

Example:
    >>> import tempfile
    >>> from trainer.loggers import CSVLogger, Logger, TensorBoardLogger
    >>> isinstance(TensorBoardLogger(tempfile.mkdtemp()), Logger), isinstance(CSVLogger(tempfile.mkdtemp()), Logger)
    (True, True)
"""

from __future__ import annotations

import sys

from trainer.logging.csv import CSVLogger
from trainer.logging.identity import ContinuesRuns
from trainer.logging.tensorboard import Logger, TensorBoardLogger, flatten_params, hparam_value, next_version_dir
from trainer.logging.mlflow import MLflowLogger
from trainer.logging.multi import LoggerList
from trainer.logging.wandb import WandbLogger

from trainer.logging import tensorboard as logger  # Lightning's `loggers.logger.Logger` (the base logger type)
from trainer.logging.tensorboard import rank_zero_experiment

# `from trainer.loggers.logger import Logger, rank_zero_experiment` (Lightning's path for a custom
# logger): Python finds the submodule in sys.modules once this module is imported.
sys.modules[f"{__name__}.logger"] = logger

MLFlowLogger = MLflowLogger  # Lightning's spelling

__all__ = [
    "Logger", "TensorBoardLogger", "CSVLogger", "WandbLogger", "MLflowLogger", "MLFlowLogger", "LoggerList", "ContinuesRuns",
    "next_version_dir", "flatten_params", "hparam_value", "rank_zero_experiment",
]
