"""Optional behaviours built on `trainer`'s public API only."""

from __future__ import annotations

from callbacks.checkpoint import ModelCheckpoint
from callbacks.early_stopping import EarlyStopping
from callbacks.lambda_callback import LambdaCallback
from callbacks.lr_monitor import LearningRateMonitor

__all__: list[str] = ["ModelCheckpoint", "EarlyStopping", "LambdaCallback", "LearningRateMonitor"]
