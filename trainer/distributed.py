"""The public names of `trainer.strategies` under the name users and YAML configs use
(`strategy: {class_path: trainer.distributed.DDP, init_args: {...}}`).

Example:
    >>> from trainer.distributed import DDP, SingleDevice
    >>> SingleDevice("cpu")
    SingleDevice(device=cpu)
"""

from __future__ import annotations

from trainer.strategies import (
    DDP,
    FSDP,
    ClusterEnvironment,
    CollectiveError,
    SingleDevice,
    Strategy,
    launched_by_torchrun,
    resolve_device,
    resolve_strategy,
)

__all__ = [
    "Strategy", "SingleDevice", "DDP", "FSDP", "resolve_device", "resolve_strategy", "launched_by_torchrun",
    "ClusterEnvironment", "CollectiveError",
]
