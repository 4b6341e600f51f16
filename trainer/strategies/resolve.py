"""`Trainer(strategy=...)`: from a name or an instance to the strategy object."""

from __future__ import annotations

import warnings

from trainer.strategies.base import SingleDevice, Strategy
from trainer.strategies.cluster import ClusterEnvironment
from trainer.strategies.ddp import DDP
from trainer.strategies.fsdp import FSDP
from trainer.strategies.parallel import ProcessGroupStrategy

__all__ = ["resolve_strategy"]


def resolve_strategy(strategy: str | Strategy, device: str) -> Strategy:
    """Pick the strategy object for `Trainer(strategy=...)`.

    "auto" is DDP when torchrun or SLURM's srun started more than one process, else one
    device; "single" is always one device (each process then trains on its own); "ddp"
    requires torchrun, srun or an initialised process group, and so does "fsdp". A `DDP(...)` or
    `FSDP(...)` instance carries its options and is bound here to this process's rank and
    `device`.
    """
    if isinstance(strategy, ProcessGroupStrategy):
        return strategy.bind(device)
    if isinstance(strategy, Strategy):
        return strategy
    if strategy == "ddp":
        return DDP().bind(device)
    if strategy == "fsdp":
        return FSDP().bind(device)
    cluster = ClusterEnvironment.detect() if strategy in ("auto", "single") else None
    if strategy == "auto" and cluster is not None and cluster.world_size > 1:
        return DDP().bind(device)
    if strategy in ("auto", "single"):
        if strategy == "single" and cluster is not None and cluster.world_size > 1:
            launcher = "torchrun with WORLD_SIZE" if cluster.kind == "torchrun" else "srun with SLURM_NTASKS"
            warnings.warn(
                f"Trainer(strategy='single') under {launcher} > 1: every process trains "
                "its own model on all the data and writes its own files. Use strategy='ddp' to train "
                "one model together.",
                stacklevel=3,
            )
        return SingleDevice(device)
    raise ValueError(
        f"Trainer(strategy=...) expected 'auto', 'ddp', 'fsdp', 'single' or a Strategy instance such as "
        f"DDP(...) or FSDP(...). Received: {strategy!r}."
    )
