"""Lightning's strategy classes under their names, for code that moves over by its imports:
`from trainer.strategies import DDPStrategy` then `Trainer(strategy=DDPStrategy(find_unused_parameters=True))`.

Each is our strategy with Lightning's arguments mapped onto its options; an argument that
has no meaning here raises a `ValueError` saying what to write instead (never silently
ignored). `isinstance` answers as Lightning's: `ParallelStrategy` is the base of `DDP` and
`FSDP` (`DDPStrategy`, `FSDPStrategy`), `SingleDeviceStrategy` matches the one-process
strategy, and `DeepSpeedStrategy` / `ModelParallelStrategy` (not offered: constructing one
says what to use) match nothing here.

Example:
    >>> DDPStrategy(find_unused_parameters=True, static_graph=False)
    DDP(find_unused_parameters=True, static_graph=False, gradient_as_bucket_view=False, comm_hook=None)
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from trainer.strategies.base import Strategy
from trainer.strategies.ddp import DDP
from trainer.strategies.fsdp import FSDP
from trainer.strategies.parallel import ProcessGroupStrategy

__all__ = [
    "DDPStrategy", "FSDPStrategy", "SingleDeviceStrategy", "ParallelStrategy", "DeepSpeedStrategy", "ModelParallelStrategy",
]

#: Lightning's base of every multi-process strategy: here DDP's and FSDP's base.
ParallelStrategy = ProcessGroupStrategy

# Lightning's plug-ins this Trainer chooses itself; passing one is refused with this reason.
_CHOSEN_HERE = {
    "accelerator": "the device comes from Trainer(accelerator=..., devices=...)",
    "parallel_devices": "the devices come from Trainer(devices=...) or the launcher",
    "cluster_environment": "torchrun's and SLURM's variables are read directly (docs/distributed.md)",
    "checkpoint_io": "checkpoints are written by the Trainer (docs/checkpoints.md)",
    "precision_plugin": "pass Trainer(precision=...)",
    "precision": "pass Trainer(precision=...)",
    "ddp_comm_state": "a comm hook is registered with state None here",
    "ddp_comm_wrapper": "not offered",
    "model_averaging_period": "not offered",
    "mixed_precision": "pass Trainer(precision='bf16-mixed' | '16-mixed'); FSDP(mixed_precision=True) gathers in that dtype",
    "device_mesh": "not offered",
    "activation_checkpointing": "pass Trainer(activation_checkpointing=[...]) (docs/performance.md)",
    "activation_checkpointing_policy": "pass Trainer(activation_checkpointing=[...]) (docs/performance.md)",
}


def _refuse(strategy: str, given: dict[str, Any]) -> None:
    problems = [f"{name}= ({_CHOSEN_HERE.get(name, 'not an option here')})" for name, value in given.items() if value is not None]
    if problems:
        raise ValueError(f"{strategy}(...) can't take " + "; ".join(problems) + ". Remove them.")


class _SameAs(type):
    """`isinstance(strategy, DDPStrategy)` is true of every `DDP` (what `Trainer(strategy="ddp")`
    builds), as Lightning's is of the strategy its "ddp" builds; subclasses (DeepSpeedStrategy)
    keep the plain check."""

    def __instancecheck__(cls, instance: Any) -> bool:
        same_as = cls.__dict__.get("_same_as")
        return isinstance(instance, same_as) if same_as is not None else super().__instancecheck__(instance)


class DDPStrategy(DDP, metaclass=_SameAs):
    """Lightning's `DDPStrategy`: `DDP` with Lightning's arguments (the keyword arguments it
    passes to `DistributedDataParallel`, `timeout`, `ddp_comm_hook`)."""

    def __init__(
        self,
        *,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = False,
        bucket_cap_mb: float | None = None,
        ddp_comm_hook: Any = None,
        timeout: int | float | datetime.timedelta | None = None,
        process_group_backend: str | None = None,
        start_method: str = "popen",
        **others: Any,
    ) -> None:
        _refuse("DDPStrategy", others)
        if start_method != "popen":
            raise ValueError(
                f"DDPStrategy(start_method={start_method!r}) is not offered: processes are started by torchrun, "
                "srun or Trainer(devices=N). Remove start_method."
            )
        _check_backend(process_group_backend)
        super().__init__(find_unused_parameters=find_unused_parameters, static_graph=static_graph,
                         gradient_as_bucket_view=gradient_as_bucket_view, bucket_cap_mb=bucket_cap_mb,
                         comm_hook=ddp_comm_hook, timeout=timeout)


DDPStrategy._same_as = DDP  # type: ignore[attr-defined]

_SHARDING = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}


class FSDPStrategy(FSDP, metaclass=_SameAs):
    """Lightning's `FSDPStrategy` onto FSDP2: `auto_wrap_policy` given as a set of module
    classes becomes `shard_modules`, `sharding_strategy` "FULL_SHARD" / "SHARD_GRAD_OP" becomes
    `reshard_after_forward` True / False, `cpu_offload` and `timeout` carry over. Checkpoints
    are sharded folders (`state_dict_type="sharded"`); export one weights file with
    `trainer export`."""

    def __init__(
        self,
        *,
        auto_wrap_policy: Iterable[type] | None = None,
        sharding_strategy: str = "FULL_SHARD",
        cpu_offload: bool = False,
        state_dict_type: str = "sharded",
        timeout: int | float | datetime.timedelta | None = None,
        process_group_backend: str | None = None,
        **others: Any,
    ) -> None:
        _refuse("FSDPStrategy", others)
        name = str(getattr(sharding_strategy, "name", sharding_strategy))
        if name not in _SHARDING:
            raise ValueError(
                f"FSDPStrategy(sharding_strategy={sharding_strategy!r}) expected one of {', '.join(map(repr, _SHARDING))} "
                "(FSDP2 shards over all ranks; for no sharding use strategy='ddp')."
            )
        if state_dict_type != "sharded":
            raise ValueError(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}): checkpoints here are always sharded folders, "
                "written by every rank; `trainer export CHECKPOINT weights.pt` writes one full weights file. "
                "Remove state_dict_type."
            )
        if auto_wrap_policy is not None and not isinstance(auto_wrap_policy, (set, frozenset, list, tuple)):
            raise ValueError(
                "FSDPStrategy(auto_wrap_policy=...) takes the set of module classes that become their own unit "
                f"(e.g. {{Block}}). Received: {auto_wrap_policy!r}; a policy function is not offered."
            )
        _check_backend(process_group_backend)
        units = None if auto_wrap_policy is None else [cls.__name__ for cls in auto_wrap_policy]
        super().__init__(shard_modules=units, reshard_after_forward=_SHARDING[name], cpu_offload=cpu_offload,
                         timeout=timeout)


FSDPStrategy._same_as = FSDP  # type: ignore[attr-defined]


class _OneProcess(type):
    """`isinstance(strategy, SingleDeviceStrategy)`: any one-process strategy (Lightning's
    answer for `Trainer(devices=1)`), never a multi-process one."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, Strategy) and not isinstance(instance, ProcessGroupStrategy)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, Strategy) and not issubclass(subclass, ProcessGroupStrategy)


class SingleDeviceStrategy(Strategy, metaclass=_OneProcess):
    """Lightning's `SingleDeviceStrategy(device=...)`: one process on `device`."""

    def __init__(self, device: Any = "cpu", **others: Any) -> None:
        _refuse("SingleDeviceStrategy", others)
        super().__init__(str(device))


class DeepSpeedStrategy(DDPStrategy):
    """Lightning's `DeepSpeedStrategy`, for `isinstance` checks (nothing here is one):
    DeepSpeed is not integrated, and constructing it says what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(
            "DeepSpeedStrategy is not offered: DeepSpeed is not integrated. Use strategy='fsdp' (or FSDPStrategy(...)), "
            "which shards parameters, gradients and optimizer state as ZeRO stage 3 does (docs/distributed.md)."
        )


class ModelParallelStrategy(ProcessGroupStrategy):
    """Lightning's `ModelParallelStrategy`, for `isinstance` checks (nothing here is one):
    constructing it says what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(
            "ModelParallelStrategy is not offered (no tensor parallelism, no device mesh). For data-parallel sharding "
            "use strategy='fsdp' (FSDP2 over all ranks), with FSDP(shard_modules=[...]) naming the blocks to shard."
        )


def _check_backend(backend: str | None) -> None:
    if backend is not None:
        raise ValueError(
            f"process_group_backend={backend!r} is not an option here: the backend follows the device (NCCL on "
            "GPUs, Gloo on CPUs), or is the one of a process group you made yourself before the Trainer. "
            "Remove process_group_backend."
        )
