"""Lightning's `lightning.pytorch.core.module`: `LightningModule` is the package's `Module`."""

from __future__ import annotations

from trainer.module import Module as LightningModule

__all__ = ["LightningModule"]
