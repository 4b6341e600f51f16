"""DCP's index (`.metadata`) unpickled without running code: only DCP's own metadata classes,
torch's dtypes, layouts and sizes, and paths are accepted (sharded.py, sharded_remote.py)."""

from __future__ import annotations

import pickle
from typing import Any

import torch

__all__ = ["IndexUnpickler"]

_METADATA_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")


class IndexUnpickler(pickle.Unpickler):
    """Unpickles DCP's index: its own metadata classes, torch's dtypes/layouts/Size and paths."""

    def find_class(self, module: str, name: str) -> Any:
        import importlib

        if module in _METADATA_MODULES and not name.startswith("__"):
            value = getattr(importlib.import_module(module), name, None)
            if isinstance(value, type):
                return value
        if module == "torch":
            value = getattr(torch, name, None)
            if value is torch.Size or isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
                return value
        if (module, name) in {("torch.serialization", "_get_layout"), ("collections", "OrderedDict")}:
            return getattr(importlib.import_module(module), name)
        if module == "pathlib" and name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"):
            return getattr(importlib.import_module(module), name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a DCP index")
