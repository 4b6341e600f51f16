"""Execution strategies: where the model runs and how ranks cooperate.

`SingleDevice` is the null strategy (one process). `DDP` is PyTorch's own
`DistributedDataParallel` on a process group made from torchrun's environment. The loop
only talks to the `Strategy` interface, so it knows nothing of torch.distributed.

Example:
    >>> from trainer.strategies import SingleDevice
    >>> SingleDevice("cpu")
    SingleDevice(device=cpu)
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainer.strategies._lightning_attributes import LightningAttributes
from trainer.strategies.materialize import refuse_meta

__all__ = ["Strategy", "SingleDevice", "resolve_device", "launched_by_torchrun"]

_NO_SYNC = contextlib.nullcontext()  # stateless: one shared instance for every micro-batch

log = logging.getLogger("trainer")

#: How each epoch metric reduces ("mean", "sum", "max", "min") and the weight this rank saw.
Reductions = Mapping[str, tuple[str, float]]


def resolve_device(device: str) -> torch.device:
    """`"auto"`: CUDA when available, else MPS when available, else CPU. `"auto"` and `"cuda"`
    (no index) name a GPU: the local rank's when a launcher started this process (torchrun,
    devices=N, srun: `strategy="single"` then trains one model per GPU, not all on GPU 0),
    else the current device."""
    chosen = torch.device(device) if device != "auto" else None
    if chosen is not None and not (chosen.type == "cuda" and chosen.index is None):
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda", _launched_gpu())
    if chosen is not None:
        return chosen
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _launched_gpu() -> int:
    from trainer.strategies.cluster import ClusterEnvironment

    cluster = ClusterEnvironment.detect()
    if cluster.kind == "none":
        return torch.cuda.current_device()
    return cluster.local_rank % torch.cuda.device_count()


def use_device(device: torch.device) -> None:
    """Make `device` the current CUDA device (a no-op for others): kernels launched without an
    explicit device, `torch.cuda` calls and the CUDA RNG a checkpoint saves then are this one's."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


class Strategy(LightningAttributes):
    """One process, one device: every method is the trivial case of its DDP meaning."""

    world_size: int = 1
    rank: int = 0
    #: Checkpoints are folders of per-rank shards (FSDP) instead of one file from rank 0.
    sharded_checkpoints: bool = False

    def __init__(self, device: str = "auto") -> None:
        self.device = resolve_device(device)

    @property
    def is_global_zero(self) -> bool:
        return self.rank == 0

    def setup_module(self, module: torch.nn.Module) -> Callable[..., Any]:
        """Move the module to the device (the current one from now on); return the callable
        that runs a training step."""
        use_device(self.device)
        refuse_meta(module, getattr(self, "name", "single"), self.device)
        module.to(self.device)
        return step_caller(module, "training_step")

    def setup_precision(self, precision: Any) -> None:
        """Ready the precision strategy for this device (FSDP first picks a sharded GradScaler)."""
        if getattr(getattr(precision, "scaler_class", None), "combines_ranks", False):
            precision.scaler_class = torch.amp.GradScaler  # an AMP() an FSDP run used before
        precision.setup(self.device)

    def step_callable(self, module: torch.nn.Module, name: str) -> Callable[..., Any]:
        """The callable that runs `module.<name>` (a validation, test or predict step)."""
        return step_caller(module, name)

    def setup_loader(self, loader: Any, *, train: bool) -> Any:
        return loader

    def module_state(self, module: torch.nn.Module) -> dict[str, Any]:
        """The module's state for a checkpoint (FSDP: each rank's shards, as DTensors)."""
        return module.state_dict()

    def optimizer_state(self, module: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
        """An optimizer's state for a checkpoint (keyed by parameter index, as PyTorch's)."""
        return optimizer.state_dict()

    def load_module_state(self, module: torch.nn.Module, state: dict[str, Any]) -> None:
        """Load whole (unsharded) weights from a single-file checkpoint into `module`."""
        module.load_state_dict(state)

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
        """Load an optimizer's whole `state_dict()` from a single-file checkpoint."""
        optimizer.load_state_dict(state)

    def manual_backward(self, loss: torch.Tensor, precision: Any, *args: Any, **kwargs: Any) -> None:
        """`Module.manual_backward`: the precision's (scaled) backward; DDP adds its sync."""
        precision.backward(loss, *args, **kwargs)

    def manual_no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Backward passes inside keep their gradients local (one process: nothing to skip)."""
        return _NO_SYNC

    def set_epoch(self, loader: Any, epoch: int) -> None:
        """Tell the loader's samplers which epoch it is (`set_epoch`, where they have one: a
        `DistributedSampler` shuffles by it), on every strategy, as Lightning does: a
        DistributedSampler a user made for one process reshuffles each epoch too; each loader
        of a `CombinedLoader`."""
        children = getattr(loader, "flattened", None)
        if isinstance(children, list) and getattr(loader, "combines_loaders", False):  # CombinedLoader, Mixture
            for child in children:
                self.set_epoch(child, epoch)
            return
        samplers = (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None))
        for index, sampler in enumerate(samplers):
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch) and not (index == 1 and sampler is samplers[0]):
                set_epoch(epoch)

    def no_sync(self, last_micro_batch: bool) -> contextlib.AbstractContextManager[Any]:
        """The context a micro-batch's backward runs in (DDP skips the all-reduce)."""
        return _NO_SYNC

    def all_agree(self, flag: bool) -> bool:
        """True when every rank's `flag` is True (one process: the flag itself)."""
        return flag

    def any_rank(self, flag: bool) -> bool:
        """True when some rank's `flag` is True (one process: the flag itself)."""
        return flag

    def all_finite(self, value: torch.Tensor) -> bool:
        """Whether `value` (a window's loss) is finite on every rank: one host read (the
        non-finite guard of optimizers that can't skip a step on the device)."""
        return math.isfinite(value)

    def max_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor`'s element-wise maximum over the ranks, computed on the device without a
        host read (one process: `tensor` itself). The fused optimizers' skip flag uses it."""
        return tensor

    def sum_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed element-wise over the ranks (one process: `tensor` itself).
        Item-weighted accumulation uses it once per window for the count of items."""
        return tensor

    def prepare_synced_backward(self, output: Any) -> None:
        """Make the next backward synchronise gradients although the forward that produced
        `output` ran without sync (the last backward of an item-weighted window, whose
        forwards all ran first). One process, or FSDP (which decides at backward): nothing."""

    def check_epoch_lengths(self, batches: int | None) -> None:
        """Every rank must run the same number of training batches (one process: nothing to check)."""

    def check_eval_lengths(self, batches: int | None, stage: str) -> None:
        """Whether every rank must run the same number of evaluation batches (FSDP: each
        step gathers parameters from all ranks); one process, or DDP: nothing to check."""

    def fewest(self, count: int) -> int:
        """The smallest `count` over the ranks (one process: `count`)."""
        return count

    def reduce_epoch(self, values: dict[str, torch.Tensor], reductions: Reductions) -> dict[str, torch.Tensor]:
        """Combine epoch metrics over ranks: weighted mean, sum, max or min (one process: as is)."""
        return values

    def check_optimizers(self, optimizers: list[Any]) -> None:
        """Refuse optimizers this strategy can't step correctly (before any step); default: all fine."""

    def store_agreement(self) -> Any:
        """What the ranks decide through the job's store (`StoreAgreement`: the step to stop at
        after a signal, a skip on every rank); None in one process, where nothing needs agreeing."""
        return None

    def barrier(self, name: str | None = None) -> None:
        """Wait for every rank (`name`: Lightning's label, unused)."""

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


def step_caller(module: Any, name: str) -> Callable[..., Any]:
    """`module.<name>` as a `(batch, batch_idx)` callable; Lightning lets a step omit
    `batch_idx`. Decided once (per fit), so a step pays nothing for it."""
    method = getattr(module, name)
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return method  # type: ignore[no-any-return]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return method  # type: ignore[no-any-return]
    return lambda batch, batch_idx, *rest, **named: method(batch, *rest, **named)  # rest: dataloader_idx (several loaders)
