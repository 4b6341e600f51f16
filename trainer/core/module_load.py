"""`Module.load_from_checkpoint`: rebuild a module from a checkpoint's hyperparameters and weights
(Lightning's `LightningModule.load_from_checkpoint`), through the checkpoint reader that never
executes code."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_module"]


def _where(map_location: Any) -> Any:
    """Lightning's default: the saved device, or the CPU when that device is missing here."""
    if map_location is not None:
        return map_location

    def fallback(storage: Any, location: str) -> Any:
        if location.startswith("cuda") and not torch.cuda.is_available():
            return storage.cpu()
        if location.startswith("mps") and not torch.backends.mps.is_available():
            return storage.cpu()
        return None

    return fallback


def load_module(cls: type, path: Any, map_location: Any, strict: bool, overrides: dict[str, Any]) -> Any:
    from trainer.checkpoint.format import CheckpointError, load_checkpoint

    if Path(path).is_dir():
        raise CheckpointError(
            f"{cls.__name__}.load_from_checkpoint({str(path)!r}): a folder of shards (an FSDP run). Expected one "
            "file: write it with `trainer export FOLDER weights.pt`, then load_state_dict(torch.load('weights.pt'))."
        )
    checkpoint = load_checkpoint(path, map_location=_where(map_location))
    hparams = dict(checkpoint.get("hparams") or checkpoint.get("hyper_parameters") or {})
    hparams.update(overrides)
    parameters = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        hparams = {k: v for k, v in hparams.items() if k in parameters}  # as Lightning: only what __init__ takes
    module = cls(**hparams)
    module.on_load_checkpoint(checkpoint)
    weights = checkpoint["module"]
    result = module.load_state_dict(weights, strict=strict)
    if not strict and (result.missing_keys or result.unexpected_keys):
        warnings.warn(
            f"{cls.__name__}.load_from_checkpoint(strict=False): missing keys {list(result.missing_keys)}, "
            f"unexpected keys {list(result.unexpected_keys)}.", stacklevel=3,
        )
    tensor = next((t for t in weights.values() if isinstance(t, torch.Tensor)), None)
    return module.to(tensor.device) if tensor is not None else module
