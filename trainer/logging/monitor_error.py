"""`MonitorError`: a metric that a callback or scheduler monitors was never logged (its public
home is `trainer.callback`, also `trainer.MonitorError`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["MonitorError"]


class MonitorError(KeyError, ValueError):
    """A metric that a callback or scheduler monitors was never logged.

    Raised during `fit` (after `last.ckpt` was written, so the finished work is kept); the
    `trainer` command reports it as a clean error with exit code 2.
    """

    __module__ = "trainer.callback"  # its public home (also `trainer.MonitorError`)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""

    @staticmethod
    def describe(owner: str, name: str, logged: Iterable[str]) -> str:
        """One missing monitor: `owner` (e.g. "EarlyStopping(monitor='val_los')") and the closest
        of the `logged` names, for a message that lists one or several of them.

        Example:
            >>> MonitorError.describe("EarlyStopping(monitor='val_los')", "val_los", ["val_loss", "train/loss"])
            "EarlyStopping(monitor='val_los'): 'val_los' was never logged. Did you mean 'val_loss'?"
        """
        close = difflib.get_close_matches(name, sorted(set(logged)), n=1, cutoff=0.6)
        return f"{owner}: {name!r} was never logged.{f' Did you mean {close[0]!r}?' if close else ''}"
