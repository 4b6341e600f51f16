"""Execution strategies: where the model runs and how ranks cooperate.

- `base.py`: the `Strategy` interface and its one-process case, `SingleDevice`;
- `parallel.py`: the process group and collectives every multi-process strategy shares;
  `process_group.py`: the group's life (made from the launcher's environment, released at exit);
- `cluster.py`: who started this process (torchrun, SLURM's srun, nobody): rank, world size, rank 0's address;
- `collectives.py`: `DDP(timeout=...)`: collectives that fail after the timeout with an error naming the wait;
- `requeue.py`: SLURM's warning signal and `scontrol requeue` after the stop's checkpoint;
- `ddp.py`: `DDP`, PyTorch's DistributedDataParallel under torchrun or srun;
- `fsdp.py`: `FSDP`, parameters, gradients and optimizer state sharded with FSDP2;
- `sampler.py`: each rank's share of a DataLoader;
- `resolve.py`: `Trainer(strategy=...)` from one of our names or an instance (Lightning's names: trainer/lightning/);
- `launch.py`: `devices=N` without torchrun or srun (this process is rank 0, it starts the others);
- `lightning.py`: Lightning's `DDPStrategy`, `FSDPStrategy`, `SingleDeviceStrategy` onto ours, and its
  base names (`ParallelStrategy`, ...) for `isinstance` checks;
- `_lightning_attributes.py`: what Lightning code reads from `trainer.strategy` (`root_device`, `reduce`, ...).

The loop only talks to the `Strategy` interface, so it knows nothing of torch.distributed.
`trainer.distributed` re-exports the public names (YAML configs use
`trainer.distributed.DDP`).

Example:
    >>> from trainer.strategies import resolve_strategy
    >>> resolve_strategy("auto", "cpu")  # outside torchrun: one process
    SingleDevice(device=cpu)
"""

from __future__ import annotations

from trainer.strategies.base import SingleDevice, Strategy, launched_by_torchrun, resolve_device
from trainer.strategies.cluster import ClusterEnvironment
from trainer.strategies.collectives import CollectiveError
from trainer.strategies.ddp import DDP
from trainer.strategies.fsdp import FSDP
from trainer.strategies.lightning import (
    DDPStrategy, DeepSpeedStrategy, FSDPStrategy, ModelParallelStrategy, ParallelStrategy, SingleDeviceStrategy,
)
from trainer.strategies.resolve import resolve_strategy

__all__ = [
    "Strategy", "SingleDevice", "DDP", "FSDP", "resolve_device", "resolve_strategy", "launched_by_torchrun",
    "ClusterEnvironment", "CollectiveError", "DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy", "ParallelStrategy",
    "DeepSpeedStrategy", "ModelParallelStrategy",
]
