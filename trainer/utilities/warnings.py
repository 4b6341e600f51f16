"""Lightning's `lightning.pytorch.utilities.warnings`: `PossibleUserWarning`, the category a
script silences with `warnings.filterwarnings("ignore", category=PossibleUserWarning)`, and
`LightningDeprecationWarning`.

Example:
    >>> import warnings
    >>> from trainer.utilities.warnings import PossibleUserWarning
    >>> warnings.filterwarnings("ignore", category=PossibleUserWarning)
    >>> issubclass(PossibleUserWarning, UserWarning)
    True
"""

from __future__ import annotations

from trainer.strategies.rank_zero import LightningDeprecationWarning, PossibleUserWarning

__all__ = ["PossibleUserWarning", "LightningDeprecationWarning"]
