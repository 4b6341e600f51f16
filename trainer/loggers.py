"""The loggers' public home: `from trainer.loggers import TensorBoardLogger, CSVLogger, ...`.

They live in `trainer/logging/` with the rest of what a run writes: `TensorBoardLogger`
(the default) in `tensorboard.py`, `CSVLogger` in `csv.py`, `WandbLogger` in `wandb.py` and
`MLflowLogger` in `mlflow.py` (these two need their library: `pip install 'loopwright[wandb]'`,
`'loopwright[mlflow]'`, imported only when their run starts), `LoggerList` (`logger=[...]`)
in `multi.py`, and `Logger` (the logger type, the base class of a logger of your own) in
`base.py`.

Lightning's module paths lead to the same classes: `trainer.loggers.logger` (`Logger`,
`rank_zero_experiment`, `DummyLogger`), `trainer.loggers.tensorboard`, `.csv_logs`, `.wandb`
and `.mlflow`.

Example:
    >>> import tempfile
    >>> from trainer.loggers import CSVLogger, Logger, TensorBoardLogger
    >>> isinstance(TensorBoardLogger(tempfile.mkdtemp()), Logger), isinstance(CSVLogger(tempfile.mkdtemp()), Logger)
    (True, True)
    >>> from trainer.loggers.csv_logs import CSVLogger as Same
    >>> Same is CSVLogger
    True
"""

from __future__ import annotations

import sys

from trainer.logging import base as logger  # Lightning's `loggers.logger` (Logger, rank_zero_experiment)
from trainer.logging import csv as csv_logs
from trainer.logging import mlflow, tensorboard, wandb
from trainer.logging.base import DummyLogger, Logger, rank_zero_experiment
from trainer.logging.csv import CSVLogger
from trainer.logging.identity import ContinuesRuns
from trainer.logging.mlflow import MLFlowLogger, MLflowLogger
from trainer.logging.multi import LoggerList
from trainer.logging.tensorboard import TensorBoardLogger, flatten_params, hparam_value, next_version_dir
from trainer.logging.wandb import WandbLogger

__all__ = [
    "Logger", "TensorBoardLogger", "CSVLogger", "WandbLogger", "MLflowLogger", "MLFlowLogger", "LoggerList", "ContinuesRuns",
    "DummyLogger", "rank_zero_experiment", "next_version_dir", "flatten_params", "hparam_value",
]

# `from trainer.loggers.tensorboard import TensorBoardLogger`: Python finds the module in
# sys.modules once this one is imported, so each path names the one module (and class)
for _path, _module in {"logger": logger, "tensorboard": tensorboard, "csv_logs": csv_logs, "wandb": wandb,
                       "mlflow": mlflow}.items():
    sys.modules[f"{__name__}.{_path}"] = _module
del _path, _module
