"""The FSDP strategy: parameters, gradients and optimizer state sharded over the ranks with
PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`), for models that no longer fit one
device (also importable as `trainer.distributed.FSDP`).

How it maps onto the loop (docs/distributed.md has the user's view):

- the steps run as the forward of a small root module (`_Steps`) that FSDP shards last, so
  its hooks gather the parameters the step needs; chosen submodules become their own FSDP
  units first (gathered one at a time, so peak memory stays near one unit's full size);
- accumulation: non-final micro-batches keep their gradients unsharded and local
  (`set_requires_gradient_sync(False)`), the last one reduce-scatters them;
- clipping and the logged norm use the global norm over all shards (trainer/precision.py);
- amp: one `GradScaler` per rank whose found-inf flags are combined over the ranks, so every
  rank skips the same steps; amp and bf16 gather parameters in the compute dtype and reduce
  gradients in float32 (`MixedPrecisionPolicy`) unless `mixed_precision=False`;
- checkpoints are folders written by every rank with torch.distributed.checkpoint
  (trainer/checkpoint/sharded.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from trainer.strategies.base import step_caller
from trainer.strategies.base import _NO_SYNC
from trainer.strategies.materialize import materialize
from trainer.strategies.parallel import ProcessGroupStrategy, unequal_counts

__all__ = ["FSDP"]

_ROOT_ATTRIBUTE = "_trainer_fsdp_root"  # set on a sharded module: its root, reused by a later fit


class FSDP(ProcessGroupStrategy):
    """Fully sharded data parallel training with FSDP2.

    Example:
        >>> FSDP(shard_modules={"Block"}, reshard_after_forward=True)  # doctest: +SKIP
    """

    name = "fsdp"
    sharded_checkpoints = True

    def __init__(
        self,
        *,
        shard_modules: Iterable[str] | None = None,
        min_shard_params: int = 1_000_000,
        reshard_after_forward: bool = True,
        mixed_precision: bool = True,
        cpu_offload: bool = False,
        timeout: int | float | datetime.timedelta | None = None,
    ) -> None:
        """Options of the sharding (see docs/distributed.md).

        Args:
            shard_modules: class names of the submodules that become their own FSDP unit (a
                transformer's block class, say). None: every submodule whose parameters,
                not counting those of units inside it, number at least `min_shard_params`.
                The rest of the model's parameters form the root unit.
            min_shard_params: the size rule's threshold when `shard_modules` is None.
            reshard_after_forward: free each unit's gathered parameters after its forward
                (and gather again for backward): less memory, more communication.
            mixed_precision: under amp/bf16, gather parameters in the compute dtype and
                reduce gradients in float32 (FSDP2's `MixedPrecisionPolicy`); False gathers
                float32 parameters (autocast still computes in the low precision).
            cpu_offload: keep sharded parameters, gradients and optimizer state in CPU memory
                between uses (FSDP2's `CPUOffloadPolicy`; CUDA devices only).
            timeout: seconds (or a `timedelta`) any rank waits in a collective before the job
                ends on every rank with an error naming the wait; None: the backend's (as `DDP`).
        """
        self._check_available()
        self._set_timeout(timeout)
        from torch.distributed import fsdp

        if not hasattr(fsdp, "fully_shard"):  # public since torch 2.6
            raise ValueError(
                f"Trainer(strategy='fsdp') uses FSDP2 (torch.distributed.fsdp.fully_shard), public since torch "
                f"2.6. Received: torch {torch.__version__}. Upgrade torch, or use strategy='ddp'."
            )
        if isinstance(shard_modules, str):
            raise ValueError(
                f"FSDP(shard_modules=...) expected a list of class names. Received the string "
                f"{shard_modules!r}: write shard_modules=[{shard_modules!r}]."
            )
        names = None if shard_modules is None else sorted({str(n) for n in shard_modules})
        if isinstance(min_shard_params, bool) or not isinstance(min_shard_params, int) or min_shard_params < 1:
            raise ValueError(f"FSDP(min_shard_params=...) expected a positive int. Received: {min_shard_params!r}.")
        self.options: dict[str, Any] = {
            "shard_modules": names,
            "min_shard_params": min_shard_params,
            "reshard_after_forward": bool(reshard_after_forward),
            "mixed_precision": bool(mixed_precision),
            "cpu_offload": bool(cpu_offload),
        }

    def _bind_options(self) -> None:
        self._root: Any = None
        self._sync: bool | None = None
        self._compute_dtype: torch.dtype | None = None
        if self.options["cpu_offload"] and self.device.type != "cuda":
            raise ValueError(
                f"FSDP(cpu_offload=True) moves shards off a CUDA device between uses. Received: device "
                f"{self.device}, whose memory already is the CPU's. Set cpu_offload=False."
            )

    def check_optimizers(self, optimizers: list[Any]) -> None:
        """cpu_offload: a fused optimizer steps the CPU shards with a CPU kernel, which would read
        the GPU's skip flags (`found_inf`, amp's `grad_scale`) through copies torch makes without
        waiting for them (`non_blocking=True` into pinned memory): a step meant to be skipped
        could run, or divide by a stale scale."""
        if not self.options["cpu_offload"]:
            return
        fused = [type(o).__name__ for o in optimizers if getattr(o, "defaults", {}).get("fused")]
        if fused:
            raise ValueError(
                f"FSDP(cpu_offload=True) with {fused[0]}(fused=True): the optimizer steps the shards in CPU "
                "memory, and its fused CPU kernel would read the GPU's skip decision (found_inf, amp's grad_scale) "
                "through a copy that is not waited for. Expected fused=False (the default foreach step) with "
                "cpu_offload, or cpu_offload=False to keep the fused step on the GPU. Under offload `self.device` "
                "is the GPU, so `fused=self.device.type == 'cuda'` picks fused: test the strategy's cpu_offload too."
            )

    def _cpu_collectives(self) -> bool:
        """cpu_offload: gradients live on the CPU, and amp's inf check and the clip norm
        all-reduce them, so the group has Gloo beside NCCL (`"cuda:nccl,cpu:gloo"`)."""
        return bool(self.options["cpu_offload"])

    # ------------------------------------------------------------------ precision
    def setup_precision(self, precision: Any) -> None:
        """amp: a GradScaler whose skip decision every rank shares; amp/bf16: the compute dtype
        the parameters are gathered in."""
        autocast = {"amp": torch.float16, "bf16": torch.bfloat16}
        self._compute_dtype = autocast.get(getattr(precision, "name", ""))
        if hasattr(precision, "scaler_class"):
            precision.scaler_class = _ShardedGradScaler
        precision.setup(self.device)

    # ------------------------------------------------------------------- the model
    def setup_module(self, module: torch.nn.Module) -> Callable[..., Any]:
        """Shard `module` (once: a later fit/validate reuses its shards); return the callable
        that runs a training step."""
        if not getattr(module, "automatic_optimization", True):
            raise ValueError(
                f"Trainer(strategy='fsdp') runs automatic optimization only; {type(module).__name__} sets "
                "automatic_optimization = False. Expected automatic optimization, or strategy='ddp' for "
                "manual optimization (docs/distributed.md)."
            )
        self._watch_collectives()
        root = getattr(module, _ROOT_ATTRIBUTE, None)
        if root is None:
            root = self._shard(module)
            # A model built on the meta device: its shards made real where they live (the CPU
            # under cpu_offload: FSDP2 refuses offloaded shards anywhere else; runs on a GPU only).
            materialize(module, root, torch.device("cpu") if self.options["cpu_offload"] else self.device)
            object.__setattr__(module, _ROOT_ATTRIBUTE, root)  # a reference, not a submodule
            if self.options["cpu_offload"]:  # its parameters say cpu; it computes on this rank's GPU
                object.__setattr__(module, "_compute_device", self.device)
        elif root.world_size != self.world_size:
            raise ValueError(
                f"{type(module).__name__} was sharded over {root.world_size} processes by an earlier "
                f"Trainer; this one has {self.world_size}. Expected the same processes, or a new model."
            )
        self._root, self._sync = root, None
        return self.step_callable(module, "training_step")

    def _shard(self, module: torch.nn.Module) -> _Steps:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        # No module.to(device) first: fully_shard moves each unit's parameters as it shards
        # them, so a model bigger than one device never has to be there whole.
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        policy = MixedPrecisionPolicy()
        if self.options["mixed_precision"] and self._compute_dtype is not None:
            policy = MixedPrecisionPolicy(param_dtype=self._compute_dtype, reduce_dtype=torch.float32)
        offload = CPUOffloadPolicy() if self.options["cpu_offload"] else OffloadPolicy()
        settings: dict[str, Any] = dict(
            mesh=mesh, reshard_after_forward=self.options["reshard_after_forward"], mp_policy=policy, offload_policy=offload
        )
        for unit in self._units(module):
            fully_shard(unit, **settings)
        root = _Steps(module, self.world_size)
        # The root's inputs are the whole batch, targets included: cast there, float targets would
        # lose precision (or overflow under fp16). Not cast, as under DDP and on one device: autocast
        # decides each op's dtype; the units inside still cast their own inputs (activations).
        fully_shard(root, **{**settings, "mp_policy": dataclasses.replace(policy, cast_forward_inputs=False)})
        return root

    def _units(self, module: torch.nn.Module) -> list[torch.nn.Module]:
        """The submodules that become FSDP units, innermost first (as fully_shard needs)."""
        names = self.options["shard_modules"]
        if names is not None:
            found = [m for m in module.modules() if m is not module and type(m).__name__ in names]
            missing = set(names) - {type(m).__name__ for m in found}
            if missing:
                raise ValueError(
                    f"FSDP(shard_modules={names}): {type(module).__name__} has no submodule of class "
                    f"{', '.join(sorted(missing))}. Expected class names among its submodules' "
                    f"({', '.join(sorted({type(m).__name__ for m in module.modules() if m is not module}))})."
                )
            return _untied(module, list(reversed(found)))  # modules() is outermost first
        units: list[torch.nn.Module] = []
        claimed: set[int] = set()
        tied = _tied_parameters(module)  # used from two places: left to the root unit

        for sub in _innermost_first(module):  # not a recursive closure: that is a reference cycle
            if sub is module:
                continue
            own = [p for p in sub.parameters() if id(p) not in claimed]
            if any(id(p) in tied for p in own):
                continue
            if sum(p.numel() for p in own) >= self.options["min_shard_params"]:
                units.append(sub)
                claimed.update(id(p) for p in own)
        return _untied(module, units)

    # ------------------------------------------------ single-file checkpoints (DDP's, one process's)
    def load_module_state(self, module: torch.nn.Module, state: dict[str, Any]) -> None:
        """Whole weights into the sharded model: each rank keeps its shard."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # a copy: set_model_state_dict replaces the dict's values with this rank's shards
        set_model_state_dict(module, dict(state), options=StateDictOptions(full_state_dict=True))

    def load_optimizer_state(self, module: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
        """A whole `optimizer.state_dict()` (keyed by parameter index) into the sharded
        optimizer: the indices become parameter names, then each rank keeps its shards."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = {id(p): name for name, p in module.named_parameters()}
        order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
        by_name: dict[str, Any] = {
            "state": {order[int(index)]: dict(values) for index, values in state["state"].items()},
            "param_groups": [dict(group, params=[order[int(i)] for i in group["params"]]) for group in state["param_groups"]],
        }
        set_optimizer_state_dict(module, optimizer, by_name, options=StateDictOptions(full_state_dict=True))

    def step_callable(self, module: torch.nn.Module, name: str) -> Callable[..., Any]:
        root = self._root
        assert root is not None, "FSDP.setup_module must run before a step"
        return lambda batch, batch_idx, *rest, **named: root(name, batch, batch_idx, *rest, **named)

    def check_eval_lengths(self, batches: int | None, stage: str) -> None:
        """Each evaluation step gathers parameters from every rank, so a rank with fewer
        batches would leave the others waiting: one clear error on every rank instead."""
        counts = self.all_gather_object(batches)
        shown = unequal_counts(counts) if None not in counts else None  # no len(): nothing to compare
        if shown is not None:
            raise ValueError(
                f"The {stage} loader yields a different number of batches on each rank ({shown}). Under FSDP "
                "every step gathers parameters from all ranks, so they must run the same number of steps. "
                "Expected equal shares: let the Trainer add a DistributedSampler (it pads the last share), "
                "or give your sampler equal lengths."
            )

    def no_sync(self, last_micro_batch: bool) -> contextlib.AbstractContextManager[Any]:
        """Non-final micro-batches keep gradients local and unsharded; the last reduce-scatters."""
        if self._sync is not last_micro_batch and self._root is not None:
            self._root.set_requires_gradient_sync(last_micro_batch)
            self._sync = last_micro_batch
        return _NO_SYNC

    def teardown(self, failed: bool = False) -> None:
        """The model stays sharded (its root is reused by a later fit or evaluation)."""
        if self._root is not None and self._sync is False:
            self._root.set_requires_gradient_sync(True)
        self._root, self._sync = None, None
        super().teardown(failed)

    def __repr__(self) -> str:
        if not self._bound:
            timeout = "" if self.timeout is None else f", timeout={self.timeout.total_seconds():g}"
            return f"FSDP({', '.join(f'{k}={v!r}' for k, v in self.options.items())}{timeout})"
        return super().__repr__()


def _innermost_first(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`module` and its submodules, each after its children (the order fully_shard needs)."""
    for child in module.children():
        yield from _innermost_first(child)
    yield module


def _tied_parameters(module: torch.nn.Module) -> set[int]:
    """Ids of the parameters registered under more than one name (tied weights)."""
    seen: dict[int, int] = {}
    for _, parameter in module.named_parameters(remove_duplicate=False):
        seen[id(parameter)] = seen.get(id(parameter), 0) + 1
    return {key for key, count in seen.items() if count > 1}


def _untied(module: torch.nn.Module, units: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """`units`, after checking that no parameter of a unit is also used from outside it (tied
    weights): FSDP frees a unit's gathered parameters after its forward, so the other user
    would meet a shard. Raises a ValueError that names both places."""
    paths = {id(m): path for path, m in module.named_modules()}
    owner: dict[int, torch.nn.Module] = {}
    for unit in units:
        for parameter in unit.parameters():
            owner.setdefault(id(parameter), unit)
    names = list(module.named_parameters(remove_duplicate=False))
    inside = {id(p): n for n, p in names if id(p) in owner and n.startswith(paths[id(owner[id(p)])] + ".")}
    for name, parameter in names:
        holder = owner.get(id(parameter))
        if holder is None or name.startswith(paths[id(holder)] + "."):
            continue
        raise ValueError(
            f"FSDP: parameter {name!r} of {type(module).__name__} is the same tensor as "
            f"{inside.get(id(parameter), '?')!r} inside the FSDP unit {paths[id(holder)]!r} ({type(holder).__name__}), "
            "so it would be used while that unit holds only its shard (tied weights). Expected both users "
            "in one unit: list their common parent in shard_modules, or leave both out of the units (the "
            "root unit holds them)."
        )
    return units


class _Steps(torch.nn.Module):
    """The FSDP root: its forward runs one of the module's steps, so the root unit's
    parameters are gathered around every step (training and evaluation alike)."""

    def __init__(self, module: torch.nn.Module, world_size: int) -> None:
        super().__init__()
        self.module = module
        self.world_size = world_size
        self._callers: dict[str, Callable[[Any, int], Any]] = {}

    def forward(self, name: str, batch: Any, batch_idx: int, *rest: Any, **named: Any) -> Any:
        caller = self._callers.get(name)
        if caller is None:
            caller = self._callers[name] = step_caller(self.module, name)
        return caller(batch, batch_idx, *rest, **named)


class _ShardedGradScaler(torch.amp.GradScaler):
    """A GradScaler for sharded gradients: each rank checks its own shards for inf/nan, then
    the ranks combine their flags, so they all skip (and back off) on the same steps.
    (torch 2.13's DTensor unscale already combines them; this does not rely on that.)"""

    combines_ranks = True

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        super().unscale_(optimizer)
        if not self.is_enabled():
            return
        from torch import distributed as dist

        found = list(self._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values())
        assert self._scale is not None
        combined = torch.zeros(1, dtype=torch.float32, device=self._scale.device)
        for flag in found:
            combined = torch.maximum(combined, flag.reshape(1).to(combined.device))
        dist.all_reduce(combined, op=dist.ReduceOp.MAX)
        for flag in found:
            flag.copy_(combined.reshape(flag.shape))
