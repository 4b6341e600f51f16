"""What code written for Lightning reads from `trainer.strategy`, on every strategy here:
`root_device`, `global_rank`, `local_rank`, `node_rank`, `num_nodes`, `num_processes`,
`barrier(name)`, `broadcast(obj, src=0)`, `reduce(tensor, reduce_op="mean")`,
`all_gather(tensor)` and `reduce_boolean_decision(decision)`, with Lightning's meanings
(one process: the trivial case of each).

Example:
    >>> from trainer.strategies import SingleDevice
    >>> import torch
    >>> strategy = SingleDevice("cpu")
    >>> strategy.root_device, strategy.global_rank, strategy.node_rank, strategy.reduce(torch.tensor(2.0))
    (device(type='cpu'), 0, 0, tensor(2.))
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LightningAttributes"]

_REDUCE_OPS = {"mean": "SUM", "avg": "SUM", "sum": "SUM", "max": "MAX", "min": "MIN", "product": "PRODUCT"}


class LightningAttributes:
    """Mixed into `Strategy`; reads `device`, `rank`, `world_size` and the launcher's
    `_cluster` (multi-process strategies) of the strategy it is part of."""

    device: torch.device
    rank: int
    world_size: int
    #: This process's rank on its machine (Lightning's `local_rank`; one process: 0).
    local_rank: int | None = 0

    @property
    def root_device(self) -> torch.device:
        """The device this process computes on (Lightning's name of `device`)."""
        return self.device

    @property
    def global_rank(self) -> int:
        return int(self.rank)

    @property
    def num_processes(self) -> int:
        """Processes on this machine (Lightning's: the devices of this node)."""
        size = getattr(getattr(self, "_cluster", None), "local_world_size", None)
        return int(size) if size else int(self.world_size)

    @property
    def num_nodes(self) -> int:
        return max(int(self.world_size) // self.num_processes, 1)

    @property
    def node_rank(self) -> int:
        return (int(self.rank) - int(self.local_rank or 0)) // self.num_processes

    def barrier(self, name: str | None = None) -> None:
        """Wait for every rank (`name` is Lightning's label; unused)."""

    def broadcast_object(self, obj: Any) -> Any:
        return obj

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s `obj` on every rank (Lightning's `strategy.broadcast`)."""
        if src != 0:
            raise ValueError(f"strategy.broadcast(obj, src={src!r}): only src=0 (rank 0's object) is offered. "
                             "Broadcast from rank 0, or use torch.distributed.broadcast_object_list directly.")
        return self.broadcast_object(obj)

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """`tensor` reduced over the ranks ("mean"/"avg", "sum", "max", "min", "product", or a
        `torch.distributed.ReduceOp`); a non-tensor is returned as is (Lightning's)."""
        op_name = str(getattr(reduce_op, "name", reduce_op) or "mean").lower()
        if op_name not in _REDUCE_OPS and op_name != "premul_sum":
            raise ValueError(f"strategy.reduce(reduce_op={reduce_op!r}) expected one of {', '.join(_REDUCE_OPS)} "
                             "or a torch.distributed.ReduceOp.")
        if not isinstance(tensor, torch.Tensor) or int(self.world_size) == 1:
            return tensor
        from torch import distributed as dist

        reduced = tensor.clone()
        dist.all_reduce(reduced, op=getattr(dist.ReduceOp, _REDUCE_OPS.get(op_name, "SUM")), group=group)
        return reduced / int(self.world_size) if op_name in ("mean", "avg") else reduced

    def all_gather(self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False) -> torch.Tensor:
        """Every rank's `tensor` stacked on a new first dimension (one process: `tensor`)."""
        if int(self.world_size) == 1:
            return tensor
        from torch import distributed as dist

        if sync_grads:
            from torch.distributed import nn as dist_nn

            return torch.stack(dist_nn.functional.all_gather(tensor, group=group))
        gathered = [torch.empty_like(tensor) for _ in range(int(self.world_size))]
        dist.all_gather(gathered, tensor.contiguous(), group=group)
        return torch.stack(gathered)

    def all_agree(self, flag: bool) -> bool:
        return flag

    def any_rank(self, flag: bool) -> bool:
        return flag

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002 - Lightning's name
        """True when every rank decided True (`all=True`), or some rank did (`all=False`)."""
        return self.all_agree(bool(decision)) if all else self.any_rank(bool(decision))
