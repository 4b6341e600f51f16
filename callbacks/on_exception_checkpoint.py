"""`OnExceptionCheckpoint`: a checkpoint when fit fails (Lightning's)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.callback import Checkpoint

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["OnExceptionCheckpoint"]

log = logging.getLogger("trainer.callbacks")


class OnExceptionCheckpoint(Checkpoint):
    """Writes `dirpath/filename.ckpt` when fit raises (Ctrl-C included), before the error
    propagates. A failed save is logged and never hides the original error; a failure inside
    an accumulation window cannot be saved (the Trainer's rule) and says so.

    Example:
        >>> OnExceptionCheckpoint("checkpoints").ckpt_path
        'checkpoints/on_exception.ckpt'
    """

    def __init__(self, dirpath: str | Path, filename: str = "on_exception") -> None:
        self.dirpath = Path(dirpath)
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        return str(self.dirpath / f"{self.filename}.ckpt")

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        try:
            trainer.save_checkpoint(self.ckpt_path)
        except Exception as error:  # noqa: BLE001 - the run's own error is the one to raise
            log.warning("OnExceptionCheckpoint could not write %s: %s", self.ckpt_path, error)
