"""What every multi-process strategy shares: the process group made from torchrun's
environment, each rank's share of the loaders, and the collectives the loop uses to agree
(DDP and FSDP build on it)."""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import sys
from typing import Any

import torch

from trainer.strategies.base import Reductions, Strategy, launched_by_torchrun
from trainer.strategies.sampler import _with_distributed_sampler

__all__ = ["ProcessGroupStrategy", "unequal_counts"]

log = logging.getLogger("trainer")


class ProcessGroupStrategy(Strategy):
    """A strategy with one process per device, started by torchrun (or `devices=N`).

    The process group is made from torchrun's environment when the Trainer is built (NCCL
    for CUDA, Gloo otherwise), so user code may build a `DistributedSampler` before `fit`;
    it is destroyed when the process exits (after a barrier), or at once when a run fails.
    One made by the user beforehand is used and never destroyed.
    """

    #: The name `Trainer(strategy=...)` takes ("ddp", "fsdp").
    name = "parallel"
    _bound = False

    def _check_available(self) -> None:
        from torch import distributed as dist

        if not dist.is_available():
            raise ValueError(f"Trainer(strategy={self.name!r}) needs torch.distributed, which this PyTorch build lacks.")

    def bind(self, device: str = "auto") -> Any:
        """Read the rank from torchrun's environment (or the user's group), pick the device and
        make the process group. `resolve_strategy` calls this with `Trainer(device=...)`; it
        raises outside torchrun.
        """
        from torch import distributed as dist

        if dist.is_initialized():
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        elif launched_by_torchrun():
            self.rank, self.world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            self.local_rank = int(os.environ["LOCAL_RANK"])
        else:
            raise ValueError(
                f"Trainer(strategy={self.name!r}) expected to run under torchrun (RANK, WORLD_SIZE and "
                "LOCAL_RANK in the environment) or with a process group already initialised. Received "
                "neither. Launch with `torchrun --nproc_per_node=N script.py`, pass devices=N, or use "
                "strategy='auto'."
            )
        self.device = self._local_device(device)
        self._created_group = False
        self._failed = False
        self._bind_options()
        self._bound = True
        self._group()  # now: a DistributedSampler built before fit finds the group
        return self

    def _bind_options(self) -> None:
        """Check the subclass's options against the chosen device (before the group exists)."""

    def _local_device(self, device: str) -> torch.device:
        if device == "auto":
            return torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")
        chosen = torch.device(device)
        if chosen.type == "cuda" and chosen.index is None:
            return torch.device("cuda", self.local_rank)
        if chosen.type not in ("cuda", "cpu"):
            raise ValueError(
                f"Trainer(strategy={self.name!r}, device={device!r}): expected a 'cuda' or 'cpu' device. "
                f"Received: {chosen.type!r}, which {type(self).__name__} does not support."
            )
        return chosen

    # ---------------------------------------------------------------- process group
    def _group(self) -> Any:
        """The default process group, made from torchrun's environment on first use."""
        from torch import distributed as dist

        if not dist.is_initialized():
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend=backend, rank=self.rank, world_size=self.world_size)
            self._created_group = True
            atexit.register(self._destroy_group)  # process exit: release it cleanly (after a barrier)
            log.info("Process group %s: rank %d of %d on %s.", backend, self.rank, self.world_size, self.device)
        return dist.group.WORLD

    def _destroy_group(self) -> None:
        """At process exit: wait for every rank, then release the group we made.

        Gloo aborts a rank whose peer tears down while still talking to it, so the ranks
        meet first. After a failure a peer may be gone or stuck in another collective, so
        the meeting is bounded (Gloo's monitored barrier) or skipped (NCCL) instead of
        hanging the exit of a job torchrun is already ending.
        """
        from torch import distributed as dist

        atexit.unregister(self._destroy_group)
        if not (self._created_group and dist.is_initialized()):
            return
        self._created_group = False
        if self._failed or getattr(sys, "last_value", None) is not None:  # or exiting on an uncaught exception
            # This rank failed; a peer may be waiting for it inside a collective (DDP's
            # all-reduce) that will never complete. Meeting it would hang (a Gloo
            # monitored_barrier bounds only rank 0's wait), so release the group at once:
            # the peer's collective then fails, and torchrun ends the job with this error.
            dist.destroy_process_group()
            return
        try:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=600))
            else:
                dist.barrier()
        except RuntimeError as error:  # a peer is gone: nothing left to wait for
            log.warning("Ranks did not all reach the exit barrier (%s); releasing the process group.", error)
        dist.destroy_process_group()

    # --------------------------------------------------------------------- loaders
    def setup_loader(self, loader: Any, *, train: bool) -> Any:
        return _with_distributed_sampler(loader, self.rank, self.world_size, self.broadcast_object)

    def set_epoch(self, loader: Any, epoch: int) -> None:
        for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
                return

    # ----------------------------------------------------------------- collectives
    def _flag_tensor(self, flag: bool) -> torch.Tensor:
        return torch.tensor([int(flag)], dtype=torch.int32, device=self.device)

    def check_epoch_lengths(self, batches: int | None) -> None:
        """Once per epoch: equal known lengths on every rank, or one clear error on all of them.

        A rank with fewer batches would end its epoch while the others wait in DDP's
        all-reduce for it: a hang. Loaders without len() agree window by window instead
        (`fewest`).
        """
        shown = unequal_counts(self.all_gather_object(batches))
        if shown is not None:
            raise ValueError(
                f"The training loader yields a different number of batches on each rank ({shown}), so the "
                "ranks would wait for each other forever. Expected the same number on every rank: give "
                "each rank a DistributedSampler (the Trainer adds one to a DataLoader over a map-style "
                "dataset), split the data evenly, or set limit_train_batches to the smallest count."
            )

    def fewest(self, count: int) -> int:
        from torch import distributed as dist

        tensor = torch.tensor([count], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=self._group())
        return int(tensor.item())

    def sum_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        from torch import distributed as dist

        summed = tensor.to(self.device)
        if summed is tensor:
            summed = tensor.clone()
        dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=self._group())
        return summed

    def all_agree(self, flag: bool) -> bool:
        from torch import distributed as dist

        tensor = self._flag_tensor(flag)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=self._group())
        return bool(tensor.item())

    def any_rank(self, flag: bool) -> bool:
        from torch import distributed as dist

        tensor = self._flag_tensor(flag)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._group())
        return bool(tensor.item())

    def reduce_epoch(self, values: dict[str, torch.Tensor], reductions: Reductions) -> dict[str, torch.Tensor]:
        """Weighted mean over all ranks' samples ("mean"), or sum / max / min over ranks.

        A metric logged on some ranks only is combined over the ranks that logged it. The
        epoch-end host read here is one small object exchange, not a per-step cost.
        """
        local = {name: (*reductions.get(name, ("mean", 1.0)), float(value)) for name, value in values.items()}
        gathered: list[dict[str, tuple[str, float, float]]] = self.all_gather_object(local)
        names = list(dict.fromkeys(name for per_rank in gathered for name in per_rank))
        out: dict[str, torch.Tensor] = {}
        for name in names:
            entries = [per_rank[name] for per_rank in gathered if name in per_rank]
            reduce = entries[0][0]
            if reduce == "mean":
                weight = sum(w for _, w, _ in entries)
                result = sum(w * v for _, w, v in entries) / weight
            elif reduce == "sum":
                result = sum(v for _, _, v in entries)
            elif reduce == "max":
                result = max(v for _, _, v in entries)
            else:
                result = min(v for _, _, v in entries)
            like = values.get(name)
            out[name] = torch.tensor(result, dtype=torch.float32, device=like.device if like is not None else self.device)
        return out

    def barrier(self) -> None:
        from torch import distributed as dist

        dist.barrier(group=self._group())

    def all_gather_object(self, obj: Any) -> list[Any]:
        from torch import distributed as dist

        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj, group=self._group())
        return gathered

    def broadcast_object(self, obj: Any) -> Any:
        from torch import distributed as dist

        holder = [obj]
        dist.broadcast_object_list(holder, src=0, group=self._group())
        return holder[0]

    def teardown(self, failed: bool = False) -> None:
        """The group stays for the next fit/validate/test in this process (a new group on the
        same torchrun store is not reliable) and is released at exit.

        After a failure nothing is destroyed at once: if every rank failed together (an agreed
        decision such as a non-finite loss), the group still works; if one rank failed alone,
        torchrun ends the others when this process exits.
        """
        self._failed = self._failed or failed

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, device={self.device})"


def unequal_counts(counts: list[int | None]) -> str | None:
    """`"rank 0: 3, rank 1: 7"` when the ranks' batch counts differ, else None."""
    if len(set(counts)) <= 1:
        return None
    return ", ".join(f"rank {r}: {'unknown (no len())' if c is None else c}" for r, c in enumerate(counts))
