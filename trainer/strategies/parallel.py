"""What every multi-process strategy shares: the process group made from torchrun's or
SLURM's environment (cluster.py), each rank's share of the loaders, and the collectives the
loop uses to agree, named and bounded by the strategy's timeout (collectives.py). The group's
own life (made, checked, released at exit) is in process_group.py. DDP and FSDP build on it."""

from __future__ import annotations

import datetime
import logging
import os
import sys
from typing import Any

import torch

from trainer.strategies.base import Reductions, Strategy
from trainer.strategies.cluster import ClusterEnvironment
from trainer.strategies.collectives import CollectiveGuard, parse_timeout
from trainer.strategies.devices import local_cuda_index
from trainer.strategies.process_group import EXIT_WAIT_S, GroupLifecycle, _collective_failure  # noqa: F401 - EXIT_WAIT_S: importable here too
from trainer.strategies.sampler import _with_distributed_sampler
from trainer.strategies.rank_zero import rank_zero_only

__all__ = ["ProcessGroupStrategy", "unequal_counts"]

log = logging.getLogger("trainer")


class ProcessGroupStrategy(GroupLifecycle, Strategy):
    """A strategy with one process per device, started by torchrun, `devices=N` or `srun`.

    The process group is made from the launcher's environment when the Trainer is built
    (NCCL for CUDA, Gloo otherwise), so user code may build a `DistributedSampler` before
    `fit`; it is destroyed when the process exits (after a barrier), or at once when a run
    fails. One made by the user beforehand is used and never destroyed. With a `timeout`
    the group is made with it and the Trainer's collectives fail after it with an error
    naming what this rank waited in (collectives.py).
    """

    #: The name `Trainer(strategy=...)` takes ("ddp", "fsdp").
    name = "parallel"
    _bound = False
    #: `init_process_group(timeout=...)` and the bound on the Trainer's collectives; None: the backend's.
    timeout: datetime.timedelta | None = None
    _guard: CollectiveGuard | None = None
    #: The local rank a launcher gave (None: not known, e.g. a group the user made); picks the GPU.
    _known_local_rank: int | None = None

    def _set_timeout(self, timeout: Any) -> None:
        """Validate and keep `DDP(timeout=...)` / `FSDP(timeout=...)`."""
        self.timeout = parse_timeout(timeout, type(self).__name__)

    def _check_available(self) -> None:
        from torch import distributed as dist

        if not dist.is_available():
            raise ValueError(f"Trainer(strategy={self.name!r}) needs torch.distributed, which this PyTorch build lacks.")

    def bind(self, device: str = "auto") -> Any:
        """Read the rank from torchrun's or SLURM's environment (or the user's group), pick the
        device and make the process group. `resolve_strategy` calls this with
        `Trainer(device=...)`; it raises when no launcher started this process.
        """
        from torch import distributed as dist

        self._cluster = ClusterEnvironment.detect()
        if dist.is_initialized():  # a group the user made: the launcher's local rank if there is one
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self._known_local_rank = self._cluster.local_rank if self._cluster.kind != "none" else _env_int("LOCAL_RANK")
        elif self._cluster.kind != "none":
            self.rank, self.world_size = self._cluster.rank, self._cluster.world_size
            self._known_local_rank = self._cluster.local_rank
        else:
            raise ValueError(
                f"Trainer(strategy={self.name!r}) expected to run under torchrun (RANK, WORLD_SIZE and "
                "LOCAL_RANK in the environment), as a task of SLURM's srun (SLURM_PROCID, SLURM_NTASKS), or "
                "with a process group already initialised. Received none of them. Launch with `torchrun "
                "--nproc_per_node=N script.py` or `srun python script.py`, pass devices=N, or use strategy='auto'."
            )
        self.local_rank = self._known_local_rank or 0  # Lightning's: 0 when no launcher says
        rank_zero_only.rank = self.rank  # type: ignore[attr-defined]  # Lightning's: the global rank once known
        self.device = self._local_device(device)
        if self.device.type == "cuda":  # always (a group the user made too): kernels and RNG go to this rank's GPU
            torch.cuda.set_device(self.device)
        self._created_group = False
        self._failed = False
        self._peer_lost = False  # a failure in a collective: at exit, no rank is waited for
        self._bind_options()
        self._bound = True
        self._group()  # now: a DistributedSampler built before fit finds the group
        self._check_group_backends()
        if self.timeout is not None:
            self._guard = CollectiveGuard(self.rank, self.world_size, self.timeout, type(self).__name__)
        return self

    def _bind_options(self) -> None:
        """Check the subclass's options against the chosen device (before the group exists)."""

    def _local_device(self, device: str) -> torch.device:
        """`cuda:LOCAL_RANK`, counted among the GPUs this process sees (one when SLURM binds a
        GPU per task, `--gpus-per-task=1`; all of the node's otherwise)."""
        if device == "auto":
            return torch.device("cuda", self._local_gpu()) if torch.cuda.is_available() else torch.device("cpu")
        chosen = torch.device(device)
        if chosen.type == "cuda" and chosen.index is None:
            return torch.device("cuda", self._local_gpu())
        if chosen.type not in ("cuda", "cpu"):
            raise ValueError(
                f"Trainer(strategy={self.name!r}, device={device!r}): expected a 'cuda' or 'cpu' device. "
                f"Received: {chosen.type!r}, which {type(self).__name__} does not support."
            )
        local_world = self._cluster.local_world_size
        if chosen.type == "cuda" and local_world is not None and local_world > 1:
            raise ValueError(
                f"Trainer(strategy={self.name!r}, device={device!r}) with {local_world} processes on this machine: "
                f"every one of them would compute on GPU {chosen.index}, and NCCL can't put two ranks on one GPU "
                "('Duplicate GPU detected'). Expected device='cuda' or 'auto': each rank takes the GPU of its local "
                "rank. To choose which GPUs the job uses, set CUDA_VISIBLE_DEVICES."
            )
        return chosen

    def _local_gpu(self) -> int:
        """strategies/devices.py decides; its ValueError names the problem (too few GPUs)."""
        from torch import distributed as dist

        bound = None
        if dist.is_initialized():  # a group bound to a device (init_process_group(device_id=...)) says which
            device_id = getattr(dist.distributed_c10d._get_default_group(), "bound_device_id", None)
            bound = device_id.index if device_id is not None and device_id.type == "cuda" else None
        try:
            return local_cuda_index(local_rank=self._known_local_rank, rank=self.rank, visible=torch.cuda.device_count(),
                                    local_world_size=self._cluster.local_world_size, launcher=self._cluster.kind,
                                    bound=bound)
        except ValueError as error:
            raise ValueError(f"Trainer(strategy={self.name!r}) on CUDA, rank {self.rank}: {error}.") from None

    def _collective(self, operation: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a collective; with a timeout, its failure names it (CollectiveGuard.run)."""
        if self._guard is None:
            return function(*args, **kwargs)
        return self._guard.run(operation, function, *args, **kwargs)

    # --------------------------------------------------------------------- loaders
    def setup_loader(self, loader: Any, *, train: bool) -> Any:
        return _with_distributed_sampler(loader, self.rank, self.world_size, self.broadcast_object)

    # ----------------------------------------------------------------- collectives
    def _flag_tensor(self, flag: bool) -> torch.Tensor:
        return self._host_value(int(flag), torch.int32)

    def _host_value(self, value: int, dtype: torch.dtype) -> torch.Tensor:
        """`[value]` on the device by a fill kernel: `torch.tensor(..., device="cuda")` would copy
        it from the host and wait for the stream, a sync on every call."""
        return torch.full((1,), value, dtype=dtype, device=self.device)

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

        tensor = self._host_value(count, torch.int64)
        return self._reduce_to_host(tensor, dist.ReduceOp.MIN, "all_reduce(MIN)")

    def _reduce_to_host(self, tensor: torch.Tensor, op: Any, name: str) -> int:
        """All-reduce a one-element tensor and read it, the read inside the named collective
        (with NCCL that read is where a rank waits)."""
        from torch import distributed as dist

        def reduce() -> int:
            dist.all_reduce(tensor, op=op, group=self._group())
            return int(tensor.item())

        return int(self._collective(name, reduce))

    def sum_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        from torch import distributed as dist

        summed = tensor.to(self.device)
        if summed is tensor:
            summed = tensor.clone()
        self._collective("all_reduce(SUM)", dist.all_reduce, summed, op=dist.ReduceOp.SUM, group=self._group())
        return summed

    def all_agree(self, flag: bool) -> bool:
        from torch import distributed as dist

        return bool(self._reduce_to_host(self._flag_tensor(flag), dist.ReduceOp.MIN, "all_reduce(MIN)"))

    def any_rank(self, flag: bool) -> bool:
        from torch import distributed as dist

        return bool(self._reduce_to_host(self._flag_tensor(flag), dist.ReduceOp.MAX, "all_reduce(MAX)"))

    def all_finite(self, value: torch.Tensor) -> bool:
        """The flag is made and all-reduced on the device; the one host read is the result's."""
        from torch import distributed as dist

        flag = torch.isfinite(value.detach()).all().to(device=self.device, dtype=torch.int32).reshape(1)
        return bool(self._reduce_to_host(flag, dist.ReduceOp.MIN, "all_reduce(MIN)"))

    def max_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        from torch import distributed as dist

        reduced = tensor.detach().clone()
        self._collective("all_reduce(MAX)", dist.all_reduce, reduced, op=dist.ReduceOp.MAX, group=self._group())
        return reduced

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

    def barrier(self, name: str | None = None) -> None:
        from torch import distributed as dist

        self._collective("barrier", dist.barrier, group=self._group())

    def all_gather_object(self, obj: Any) -> list[Any]:
        from torch import distributed as dist

        gathered: list[Any] = [None] * self.world_size
        self._collective("all_gather_object", dist.all_gather_object, gathered, obj, group=self._group())
        return gathered

    def broadcast_object(self, obj: Any) -> Any:
        from torch import distributed as dist

        holder = [obj]
        self._collective("broadcast_object_list", dist.broadcast_object_list, holder, src=0, group=self._group())
        return holder[0]

    def store_agreement(self) -> Any:
        """Once per fit on every rank: the agreement through the process group's store (one
        round trip now, none per step until a signal arrives); None without a default store."""
        from torch.distributed import distributed_c10d

        from trainer.strategies.agreement import StoreAgreement

        try:
            store = distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):  # a torch without it: agreed at logging steps
            return None
        return StoreAgreement.start(store, self.world_size)

    def _watch_collectives(self) -> None:
        """With a timeout: start the collective watchdog for the run (`setup_module`); it
        stops at `teardown` and when the group is released."""
        if self._guard is not None:
            from torch.distributed import distributed_c10d

            try:
                store = distributed_c10d._get_default_store()
            except (AttributeError, RuntimeError, ValueError) as error:  # a torch without it: names, no watchdog
                log.warning("No collective watchdog: the process group's store is not available (%s).", error)
                return
            self._guard.start(store)

    def teardown(self, failed: bool = False) -> None:
        """The group stays for the next fit/validate/test in this process (a new group on the
        same torchrun store is not reliable) and is released at exit.

        After a failure nothing is destroyed at once: if every rank failed together (an agreed
        decision such as a non-finite loss), the group still works; if one rank failed alone,
        torchrun ends the others when this process exits.

        Raises:
            CollectiveError: with a timeout, called while handling a failure of DDP's or
                FSDP's own collectives (the gradient all-reduce in backward): the same error,
                explained as the Trainer's collectives explain theirs.
        """
        self._failed = self._failed or failed
        if failed and _collective_failure(sys.exc_info()[1]):
            self._peer_lost = True  # a peer did not come to a collective: it won't come to the exit either
        guard = self._guard
        if guard is None:
            return
        explained = guard.explain(sys.exc_info()[1]) if failed else None
        guard.stop()
        if explained is not None:
            raise explained from sys.exc_info()[1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, device={self.device})"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def unequal_counts(counts: list[int | None]) -> str | None:
    """`"rank 0: 3, rank 1: 7"` when the ranks' batch counts differ, else None."""
    if len(set(counts)) <= 1:
        return None
    return ", ".join(f"rank {r}: {'unknown (no len())' if c is None else c}" for r, c in enumerate(counts))
