"""What the Trainer was set up with, under Lightning's names: the model as it runs, the
devices, the precision object, and its arguments as read-only attributes (`trainer.min_epochs`)."""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from trainer.core.compile import check_compile_options
from trainer.core.properties import TrainerProperties

if TYPE_CHECKING:
    from trainer.precision import Precision

__all__ = ["TrainerSettings"]


class _Arg:
    """A read-only Trainer attribute that repeats one of its arguments (`trainer.min_epochs`);
    a `missing` value (None unless given) reads as `replace`."""

    def __init__(self, name: str, replace: Any = None, *, missing: Any = None) -> None:
        self.name, self.replace, self.missing = name, replace, missing

    def __get__(self, trainer: TrainerSettings | None, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        value = getattr(trainer.args, self.name)
        return self.replace if self.replace is not None and value == self.missing else value

    def __set__(self, trainer: TrainerSettings, value: Any) -> None:
        raise AttributeError(f"trainer.{self.name} is read-only here: pass Trainer({self.name}=...) instead.")


class TrainerSettings(TrainerProperties):
    """Mixed into `Trainer`: its setup as Lightning names it, over its state (`TrainerProperties`)."""

    # ---------------------------------------------------------- model and devices
    @property
    def model(self) -> torch.nn.Module | None:
        """The module as the strategy runs it: under DDP the `DistributedDataParallel`
        wrapper (its `.module` holds a thin step wrapper around yours), else the module
        itself (FSDP shards it in place). `lightning_module` is always the module."""
        wrapped = getattr(self.strategy, "_ddp", None)
        return wrapped if wrapped is not None else self._run.module

    @property
    def accelerator(self) -> str:
        """The device type the Trainer runs on: "cpu", "cuda" or "mps" (Lightning returns an
        Accelerator object; `trainer.strategy.device` is the full `torch.device`)."""
        return str(self.strategy.device.type)

    @property
    def device_ids(self) -> list[int]:
        """The device indexes this node uses (one process: its device's; CPU: [0])."""
        if self.world_size == 1:
            return [self.strategy.device.index or 0]
        return list(range(self._local_world_size()))

    @property
    def num_devices(self) -> int:
        """Devices per node (Lightning's meaning: processes per node)."""
        return len(self.device_ids)

    @property
    def num_nodes(self) -> int:
        """Machines in the job: the world size over the processes per machine."""
        return max(self.world_size // self._local_world_size(), 1)

    @property
    def node_rank(self) -> int:
        """This machine's index in the job (0 for one machine)."""
        return (self.global_rank - self.local_rank) // self._local_world_size()

    def _local_world_size(self) -> int:
        cluster = getattr(self.strategy, "_cluster", None)
        size = getattr(cluster, "local_world_size", None)
        return int(size) if size else self.world_size

    @property
    def precision_plugin(self) -> Precision:
        """Lightning's name of the precision object (`FP32()`, `AMP()`, `BF16()`): `trainer.precision`."""
        return self._run.precision

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """AMP's GradScaler (float16 autocast); None under fp32 and bf16."""
        return getattr(self._run.precision, "scaler", None)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """`print` on each machine's first process only (Lightning's rule: local rank 0).

        Example: ``trainer.print("epoch", trainer.current_epoch)``.
        """
        if self.local_rank == 0:
            builtins.print(*args, **kwargs)

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Create a model's tensors directly on the Trainer's device (torch's default-device
        context), as Lightning's does for a mixed precision. The dtype stays float32: every
        precision here autocasts and keeps float32 weights. Under FSDP a plain context (each
        unit moves to its device as it is sharded), and with `empty_init=True` the meta device
        (as Lightning's FSDP): no memory until FSDP has sharded the model and initialized each
        rank's shards with every module's `reset_parameters()`. Elsewhere `empty_init` is
        accepted and ignored.

        Example:
            >>> import torch
            >>> from trainer import Trainer
            >>> with Trainer(logger=False, device="cpu").init_module():
            ...     layer = torch.nn.Linear(2, 2)
            >>> layer.weight.device.type
            'cpu'
        """
        if getattr(self.strategy, "name", None) == "fsdp":
            with torch.device("meta") if empty_init else contextlib.nullcontext():
                yield
            return
        with torch.device(self.strategy.device):
            yield

    # -------------------------------------------------------- the Trainer's arguments
    @property
    def accumulate_grad_batches(self) -> int:
        """Micro-batches per optimizer step. Set it from `on_train_epoch_start` to change it
        for that epoch (`GradientAccumulationScheduler` does)."""
        return int(self.args.accumulate_grad_batches)

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"trainer.accumulate_grad_batches expected an int >= 1. Received: {value!r}.")
        check_compile_options(self.args.compile, value, later=True)  # CUDA graphs: no accumulation, set now or later
        self.args.accumulate_grad_batches = value

    # Lightning's Trainer attributes that repeat its arguments (read-only here).
    min_epochs = _Arg("min_epochs")
    min_steps = _Arg("min_steps")
    gradient_clip_val = _Arg("gradient_clip_val")
    gradient_clip_algorithm = _Arg("gradient_clip_algorithm")
    log_every_n_steps = _Arg("log_every_n_steps")
    check_val_every_n_epoch = _Arg("check_val_every_n_epoch")
    val_check_interval = _Arg("val_check_interval", 1.0)  # not given: once per epoch, Lightning's 1.0
    num_sanity_val_steps = _Arg("num_sanity_val_steps", missing=-1, replace=math.inf)  # -1 (all): inf, as Lightning
    limit_train_batches = _Arg("limit_train_batches", 1.0)  # not given: the whole loader, Lightning's 1.0
    limit_val_batches = _Arg("limit_val_batches", 1.0)
    limit_test_batches = _Arg("limit_test_batches", 1.0)
    limit_predict_batches = _Arg("limit_predict_batches", 1.0)
    overfit_batches = _Arg("overfit_batches")
    reload_dataloaders_every_n_epochs = _Arg("reload_dataloaders_every_n_epochs")
    barebones = _Arg("barebones")
    enable_autolog_hparams = _Arg("enable_autolog_hparams")
