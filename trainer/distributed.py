"""Execution strategies: where the model runs and how ranks cooperate.

`SingleDevice` is the null strategy (one process). `DDP` is PyTorch's own
`DistributedDataParallel` on a process group made from torchrun's environment. The loop
only talks to the `Strategy` interface, so it knows nothing of torch.distributed.

Example:
    >>> from trainer.distributed import resolve_strategy
    >>> resolve_strategy("auto", "cpu")  # outside torchrun: one process
    SingleDevice(device=cpu)
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainer.module import step_caller

__all__ = ["Strategy", "SingleDevice", "DDP", "resolve_device", "resolve_strategy", "launched_by_torchrun"]

_NO_SYNC = contextlib.nullcontext()  # stateless: one shared instance for every micro-batch

log = logging.getLogger("trainer")

#: How each epoch metric reduces ("mean", "sum", "max", "min") and the weight this rank saw.
Reductions = Mapping[str, tuple[str, float]]


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
    """One process, one device: every method is the trivial case of its DDP meaning."""

    world_size: int = 1
    rank: int = 0

    def __init__(self, device: str = "auto") -> None:
        self.device = resolve_device(device)

    @property
    def is_global_zero(self) -> bool:
        return self.rank == 0

    def setup_module(self, module: torch.nn.Module) -> Callable[..., Any]:
        """Move the module to the device; return the callable that runs a training step."""
        module.to(self.device)
        return step_caller(module, "training_step")

    def setup_loader(self, loader: Any, *, train: bool) -> Any:
        return loader

    def manual_backward(self, loss: torch.Tensor, precision: Any, *args: Any, **kwargs: Any) -> None:
        """`Module.manual_backward`: the precision's (scaled) backward; DDP adds its sync."""
        precision.backward(loss, *args, **kwargs)

    def manual_no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Backward passes inside keep their gradients local (one process: nothing to skip)."""
        return _NO_SYNC

    def set_epoch(self, loader: Any, epoch: int) -> None:
        """Tell a distributed sampler which epoch it is (nothing to do for one process)."""

    def no_sync(self, last_micro_batch: bool) -> contextlib.AbstractContextManager[Any]:
        """The context a micro-batch's backward runs in (DDP skips the all-reduce)."""
        return _NO_SYNC

    def all_agree(self, flag: bool) -> bool:
        """True when every rank's `flag` is True (one process: the flag itself)."""
        return flag

    def any_rank(self, flag: bool) -> bool:
        """True when some rank's `flag` is True (one process: the flag itself)."""
        return flag

    def check_epoch_lengths(self, batches: int | None) -> None:
        """Every rank must run the same number of training batches (one process: nothing to check)."""

    def fewest(self, count: int) -> int:
        """The smallest `count` over the ranks (one process: `count`)."""
        return count

    def reduce_epoch(self, values: dict[str, torch.Tensor], reductions: Reductions) -> dict[str, torch.Tensor]:
        """Combine epoch metrics over ranks: weighted mean, sum, max or min (one process: as is)."""
        return values

    def barrier(self) -> None:
        """Wait for every rank."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        return obj

    def teardown(self, failed: bool = False) -> None:
        """Release what `setup_module` acquired (called when fit/validate/test/predict end)."""

    def __repr__(self) -> str:
        return f"SingleDevice(device={self.device})"


SingleDevice = Strategy


def launched_by_torchrun() -> bool:
    """Whether torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) is present."""
    return all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


from trainer._ddp import DDP  # noqa: E402  (the DDP strategy builds on the classes above)


def resolve_strategy(strategy: str | Strategy, device: str) -> Strategy:
    """Pick the strategy object for `Trainer(strategy=...)`.

    "auto" is DDP when torchrun started more than one process, else one device; "single"
    is always one device (each torchrun process then trains on its own); "ddp" requires
    torchrun or an initialised process group. A `DDP(...)` instance carries DDP's options
    and is bound here to this process's rank and `device`.
    """
    if isinstance(strategy, DDP):
        return strategy.bind(device)
    if isinstance(strategy, Strategy):
        return strategy
    if strategy == "ddp":
        return DDP().bind(device)
    if strategy == "auto" and launched_by_torchrun() and int(os.environ["WORLD_SIZE"]) > 1:
        return DDP().bind(device)
    if strategy in ("auto", "single"):
        if strategy == "single" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            warnings.warn(
                "Trainer(strategy='single') under torchrun with WORLD_SIZE > 1: every process trains "
                "its own model on all the data and writes its own files. Use strategy='ddp' to train "
                "one model together.",
                stacklevel=3,
            )
        return SingleDevice(device)
    raise ValueError(f"Trainer(strategy=...) expected 'auto', 'ddp', 'single' or a Strategy instance such as DDP(...). Received: {strategy!r}.")
