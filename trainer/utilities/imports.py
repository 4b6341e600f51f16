"""Which optional packages are installed, under the names Lightning's example scripts import
from `lightning.pytorch.utilities.imports` (`if _TORCHVISION_AVAILABLE: import torchvision`).
Each is a bool found without importing the package.

Example:
    >>> from trainer.utilities.imports import _TORCHVISION_AVAILABLE
    >>> isinstance(_TORCHVISION_AVAILABLE, bool)
    True
"""

from __future__ import annotations

import importlib.util

__all__ = ["_TORCHVISION_AVAILABLE", "_OMEGACONF_AVAILABLE", "_RICH_AVAILABLE"]


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


_TORCHVISION_AVAILABLE = _installed("torchvision")
_OMEGACONF_AVAILABLE = _installed("omegaconf")
_RICH_AVAILABLE = _installed("rich")
