"""The DDP strategy: DistributedDataParallel under torchrun (also importable as
`trainer.distributed.DDP`, the name YAML configs use)."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainer.strategies.base import _NO_SYNC, Reductions, Strategy, launched_by_torchrun
from trainer.strategies.sampler import _with_distributed_sampler
from trainer.module import step_caller

__all__ = ["DDP"]

log = logging.getLogger("trainer")


class DDP(Strategy):
    """Data-parallel training with `torch.nn.parallel.DistributedDataParallel`.

    One process per device, started by torchrun. The process group is made from torchrun's
    environment the first time it is needed (NCCL for CUDA, Gloo otherwise) and destroyed
    when the process exits (after a barrier), or at once when a run fails; one made by the
    user beforehand is used and never destroyed. See docs/distributed.md.
    """

    def __init__(
        self,
        *,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = False,
        bucket_cap_mb: float | None = None,
        comm_hook: str | Callable[..., Any] | None = None,
    ) -> None:
        """Options passed to `DistributedDataParallel` (see docs/distributed.md).

        Args:
            find_unused_parameters: let parameters that a step does not use go without a
                gradient (always on in manual optimization).
            static_graph: the set of used parameters never changes (lets DDP optimise).
            gradient_as_bucket_view: gradients are views into the all-reduce buckets (saves memory).
            bucket_cap_mb: bucket size in MiB (None: DDP's default, 25).
            comm_hook: "fp16" or "bf16" (PyTorch's compression hooks), or a callable
                `hook(state, bucket) -> Future` registered with state None.

        Example:
            >>> DDP(find_unused_parameters=True, comm_hook="fp16")  # doctest: +SKIP
        """
        from torch import distributed as dist

        if not dist.is_available():
            raise ValueError("Trainer(strategy='ddp') needs torch.distributed, which this PyTorch build lacks.")
        if not (comm_hook is None or comm_hook in ("fp16", "bf16") or callable(comm_hook)):
            raise ValueError(
                f"DDP(comm_hook=...) expected 'fp16', 'bf16', a callable hook(state, bucket) or None. "
                f"Received: {comm_hook!r} of type {type(comm_hook).__name__}."
            )
        if bucket_cap_mb is not None and not bucket_cap_mb > 0:
            raise ValueError(f"DDP(bucket_cap_mb=...) expected a positive number of MiB or None. Received: {bucket_cap_mb!r}.")
        self.options: dict[str, Any] = {
            "find_unused_parameters": bool(find_unused_parameters),
            "static_graph": bool(static_graph),
            "gradient_as_bucket_view": bool(gradient_as_bucket_view),
        }
        if bucket_cap_mb is not None:
            self.options["bucket_cap_mb"] = float(bucket_cap_mb)
        self.comm_hook = comm_hook
        self._bound = False

    def bind(self, device: str = "auto") -> DDP:
        """Read the rank from torchrun's environment (or the user's group) and pick the device.

        `resolve_strategy` calls this with `Trainer(device=...)`; it raises outside torchrun.
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
                "Trainer(strategy='ddp') expected to run under torchrun (RANK, WORLD_SIZE and LOCAL_RANK "
                "in the environment) or with a process group already initialised. Received neither. "
                "Launch with `torchrun --nproc_per_node=N script.py`, or use strategy='auto'."
            )
        self.device = self._local_device(device)
        self._created_group = False
        self._failed = False
        self._ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self._manual = False
        self._manual_sync = True
        if self.comm_hook == "bf16" and self.device.type != "cuda":
            raise ValueError(
                f"DDP(comm_hook='bf16') needs CUDA devices with NCCL (PyTorch's bf16 hook). Received: "
                f"device {self.device}. Use comm_hook='fp16' on CPU/Gloo, or no hook."
            )
        self._bound = True
        return self

    def _local_device(self, device: str) -> torch.device:
        if device == "auto":
            return torch.device("cuda", self.local_rank) if torch.cuda.is_available() else torch.device("cpu")
        chosen = torch.device(device)
        if chosen.type == "cuda" and chosen.index is None:
            return torch.device("cuda", self.local_rank)
        if chosen.type not in ("cuda", "cpu"):
            raise ValueError(
                f"Trainer(strategy='ddp', device={device!r}): expected a 'cuda' or 'cpu' device. "
                f"Received: {chosen.type!r}, which DistributedDataParallel does not support."
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
        if self._failed:
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

    def teardown(self, failed: bool = False) -> None:
        """Drop the DDP wrapper. The group stays for the next fit/validate/test in this process
        (a new group on the same torchrun store is not reliable) and is released at exit.

        After a failure nothing is destroyed at once: if every rank failed together (an agreed
        decision such as a non-finite loss), the group still works; if one rank failed alone,
        torchrun ends the others when this process exits.
        """
        self._ddp = None
        self._failed = self._failed or failed

    # ------------------------------------------------------------------- the model
    def setup_module(self, module: torch.nn.Module) -> Callable[..., Any]:
        """Wrap `module` in DistributedDataParallel; return the callable that runs a training step.

        DDP's gradient hooks fire only for a forward that goes through the wrapper, so the
        training step is run as the forward of a small module that DDP wraps.
        """
        self._group()
        module.to(self.device)
        if not any(p.requires_grad for p in module.parameters()):
            self._ddp = None  # nothing to synchronise (e.g. evaluation of a frozen model)
            return step_caller(module, "training_step")
        ids = [self.device.index] if self.device.type == "cuda" else None
        # Manual optimization backpropagates several losses inside one training step (a GAN's
        # discriminator, then its generator), each touching some of the parameters: the
        # reducer is prepared before each backward with the parameters that loss reaches.
        manual = not getattr(module, "automatic_optimization", True)
        options = {**self.options, "find_unused_parameters": self.options["find_unused_parameters"] or manual}
        self._ddp = torch.nn.parallel.DistributedDataParallel(_TrainingStep(module, manual), device_ids=ids, **options)
        self._register_comm_hook(self._ddp)
        self._manual = manual
        object.__setattr__(self._ddp.module, "wrapper", self._ddp)  # a reference, not a submodule
        return self._training_step

    def _register_comm_hook(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        if self.comm_hook is None:
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if self.comm_hook == "fp16":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif self.comm_hook == "bf16":
            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        else:
            ddp.register_comm_hook(None, self.comm_hook)  # type: ignore[arg-type]

    def _training_step(self, batch: Any, batch_idx: int) -> Any:
        assert self._ddp is not None, "DDP.setup_module must run before a training step"
        try:
            return self._ddp(batch, batch_idx)
        finally:
            self._ddp.require_backward_grad_sync = True  # manual mode turned it off after the step

    def manual_backward(self, loss: torch.Tensor, precision: Any, *args: Any, **kwargs: Any) -> None:
        ddp = self._ddp
        if ddp is not None and self._manual_sync and torch.is_grad_enabled():
            from torch.nn.parallel.distributed import _find_tensors

            ddp.require_forward_param_sync = True
            ddp.reducer.prepare_for_backward(list(_find_tensors(loss)))
        precision.backward(loss, *args, **kwargs)

    @contextlib.contextmanager
    def manual_no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally (`opt.toggle_model(sync_grad=False)`)."""
        previous, self._manual_sync = self._manual_sync, False
        try:
            yield
        finally:
            self._manual_sync = previous

    def no_sync(self, last_micro_batch: bool) -> contextlib.AbstractContextManager[Any]:
        if last_micro_batch or self._ddp is None:
            return _NO_SYNC
        return self._ddp.no_sync()

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
        counts = self.all_gather_object(batches)
        if len(set(counts)) > 1:
            shown = ", ".join(f"rank {r}: {'unknown (no len())' if c is None else c}" for r, c in enumerate(counts))
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

    def __repr__(self) -> str:
        if not self._bound:
            return f"DDP({', '.join(f'{k}={v!r}' for k, v in self.options.items())}, comm_hook={self.comm_hook!r})"
        return f"DDP(rank={self.rank}, world_size={self.world_size}, device={self.device})"


class _TrainingStep(torch.nn.Module):
    """Makes `training_step` the forward that DistributedDataParallel wraps."""

    def __init__(self, module: torch.nn.Module, manual: bool = False) -> None:
        super().__init__()
        self.module = module
        self.manual = manual
        self.wrapper: Any = None
        self.step = step_caller(module, "training_step")

    def forward(self, batch: Any, batch_idx: int) -> Any:
        output = self.step(batch, batch_idx)
        if self.manual and self.wrapper is not None:
            # The step's backward passes already ran inside (manual_backward prepared each);
            # DDP must not prepare for one more after this forward returns.
            self.wrapper.require_backward_grad_sync = False
        return output
