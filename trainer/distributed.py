"""Execution strategies: where the model runs and how ranks cooperate.

`SingleDevice` is the null strategy (one process). The loop only talks to this
interface, so it knows nothing of torch.distributed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Strategy", "SingleDevice", "resolve_device", "resolve_strategy"]


def resolve_device(device: str) -> torch.device:
    """`"auto"`: CUDA when available, else MPS when available, else CPU."""
    if device != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


class Strategy:
    """One process, one device."""

    world_size: int = 1
    rank: int = 0

    def __init__(self, device: str = "auto") -> None:
        self._device_arg = device
        self.device = resolve_device(device)

    @property
    def is_global_zero(self) -> bool:
        return self.rank == 0

    def setup_module(self, module: torch.nn.Module) -> Callable[..., Any]:
        """Move the module to the device; return the callable that runs a training step."""
        module.to(self.device)
        return module.training_step  # type: ignore[return-value]

    def setup_loader(self, loader: Any, *, train: bool) -> Any:
        return loader

    def set_epoch(self, loader: Any, epoch: int) -> None:
        """Tell a distributed sampler which epoch it is (nothing to do for one process)."""

    def no_sync(self, last_micro_batch: bool) -> contextlib.AbstractContextManager[Any]:
        """The context a micro-batch's backward runs in (DDP skips the all-reduce)."""
        return contextlib.nullcontext()

    def all_agree(self, flag: bool) -> bool:
        """True when every rank's `flag` is True (one process: the flag itself)."""
        return flag

    def reduce_mean(self, values: dict[str, torch.Tensor], weights: dict[str, float]) -> dict[str, torch.Tensor]:
        """Average epoch metrics over ranks, weighted by how many values each rank saw."""
        return values

    def barrier(self) -> None:
        """Wait for every rank."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def teardown(self) -> None:
        """Release what `setup_module` acquired."""


SingleDevice = Strategy


def resolve_strategy(strategy: str, device: str) -> Strategy:
    """Pick the strategy object for `Trainer(strategy=...)`."""
    if strategy in ("auto", "single"):
        return SingleDevice(device)
    raise ValueError(
        f"Trainer(strategy={strategy!r}): the 'ddp' strategy needs torchrun; expected 'auto' or 'single' "
        "in one process."
    )
