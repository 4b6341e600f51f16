"""The loggers' public home: `from trainer.loggers import TensorBoardLogger, Logger`.

They live in `trainer/logging/loggers.py` with the rest of what a run writes.

Example:
    >>> import tempfile
    >>> from trainer.loggers import Logger, TensorBoardLogger
    >>> isinstance(TensorBoardLogger(tempfile.mkdtemp()), Logger)
    True
"""

from __future__ import annotations

from trainer.logging.loggers import Logger, TensorBoardLogger, flatten_params, hparam_value, next_version_dir

__all__ = ["Logger", "TensorBoardLogger", "next_version_dir", "flatten_params", "hparam_value"]
