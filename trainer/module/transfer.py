"""The batch transfer hooks (`on_before_batch_transfer`, `transfer_batch_to_device`,
`on_after_batch_transfer`) of a module or its DataModule, composed into one callable: the loops
move every batch with it, and the model summary and graph move `example_input_array` with it,
as Lightning does."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from trainer._utils import move_to_device
from trainer.module import Module

__all__ = ["batch_mover"]

_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def batch_mover(module: Any, datamodule: Any, device: torch.device, dataloader_idx: int = 0) -> Callable[[Any], Any] | None:
    """The module's (or the DataModule's) batch transfer hooks as one `batch -> batch` callable:
    `on_before_batch_transfer`, `transfer_batch_to_device`, `on_after_batch_transfer`. None when
    neither overrides any of them (the loops then move batches themselves, at no extra cost).

    Each hook comes from one object, Lightning's rule: the DataModule's when it overrides it,
    else the module's (with Lightning's warning when both exist and the module's is the one
    overridden, or both override it).
    """
    from trainer.datamodule import DataModule

    chosen: list[Callable[..., Any] | None] = []
    for name in _TRANSFER_HOOKS:
        on_module = getattr(type(module), name, None) is not getattr(Module, name, None)
        on_data = datamodule is not None and getattr(type(datamodule), name, None) not in (None, getattr(DataModule, name, None))
        if on_data and on_module:
            warnings.warn(f"You have overridden `{name}` in both the Module and the DataModule: the DataModule's runs.",
                          UserWarning, stacklevel=2)
        elif on_module and datamodule is not None:
            warnings.warn(f"You have overridden `{name}` in the Module and passed a DataModule: the Module's runs.",
                          UserWarning, stacklevel=2)
        chosen.append(getattr(datamodule, name) if on_data else getattr(module, name) if on_module else None)
    before, transfer, after = chosen
    if before is None and transfer is None and after is None:
        return None

    def move(batch: Any) -> Any:
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = transfer(batch, device, dataloader_idx) if transfer is not None else move_to_device(batch, device)
        if after is not None:
            batch = after(batch, dataloader_idx)
        return batch

    return move
