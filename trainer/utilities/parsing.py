"""Lightning's `lightning.pytorch.utilities.parsing`: `AttributeDict`, the dict `self.hparams`
is (`hparams.lr` as well as `hparams["lr"]`).

Example:
    >>> from trainer.utilities.parsing import AttributeDict
    >>> hparams = AttributeDict(lr=0.1)
    >>> hparams.lr, hparams["lr"]
    (0.1, 0.1)
"""

from __future__ import annotations

from trainer._hparams import AttributeDict

__all__ = ["AttributeDict"]
