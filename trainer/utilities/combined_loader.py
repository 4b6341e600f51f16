"""Lightning's `lightning.pytorch.utilities.combined_loader`: `CombinedLoader` at the same path
(also `trainer.utilities.CombinedLoader`). The loader itself lives with the loops
(`trainer/loops/combined.py`), which read it and resume it exactly.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from trainer.utilities.combined_loader import CombinedLoader
    >>> combined = CombinedLoader([DataLoader(range(4), batch_size=2), DataLoader(range(2), batch_size=2)], "min_size")
    >>> len(combined)
    1
"""

from __future__ import annotations

from trainer.loops.combined import CombinedLoader

__all__ = ["CombinedLoader"]
