"""LightningCLI's import path: `from trainer.cli import LightningCLI` in a training script.

The class is `trainer.config.CLI` (trainer/config/script.py): the script's own command line,
`python train.py fit --config exp.yaml --model.hidden 64`, checked by the YAML layer.
"""

from __future__ import annotations

from trainer.config.optim import ReduceLROnPlateau
from trainer.config.save_config import SaveConfigCallback
from trainer.config.script import CLI, LightningArgumentParser, LightningCLI

__all__ = ["CLI", "LightningArgumentParser", "LightningCLI", "ReduceLROnPlateau", "SaveConfigCallback"]
