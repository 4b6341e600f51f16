"""The DDP strategy: DistributedDataParallel under torchrun (also importable as
`trainer.distributed.DDP`, the name YAML configs use)."""

from __future__ import annotations

import contextlib
import datetime
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainer.strategies.base import step_caller
from trainer.strategies.base import _NO_SYNC
from trainer.strategies.materialize import refuse_meta
from trainer.strategies.parallel import ProcessGroupStrategy

__all__ = ["DDP"]

log = logging.getLogger("trainer")


class DDP(ProcessGroupStrategy):
    """Data-parallel training with `torch.nn.parallel.DistributedDataParallel`.

    One process per device, started by torchrun (or `devices=N`); the process group is
    `ProcessGroupStrategy`'s. See docs/distributed.md.
    """

    def __init__(
        self,
        *,
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = False,
        bucket_cap_mb: float | None = None,
        comm_hook: str | Callable[..., Any] | None = None,
        timeout: int | float | datetime.timedelta | None = None,
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
            timeout: seconds (or a `timedelta`) any rank waits in a collective before the job
                ends on every rank with an error naming the wait (`init_process_group(timeout=...)`
                and the Trainer's own collectives); None: the backend's (NCCL 10 min, Gloo 30 min).

        Example:
            >>> DDP(find_unused_parameters=True, comm_hook="fp16", timeout=300)  # doctest: +SKIP
        """
        self._check_available()
        self._set_timeout(timeout)
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

    name = "ddp"

    def _bind_options(self) -> None:
        self._ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self._manual = False
        self._manual_sync = True
        if self.comm_hook == "bf16" and self.device.type != "cuda":
            raise ValueError(
                f"DDP(comm_hook='bf16') needs CUDA devices with NCCL (PyTorch's bf16 hook). Received: "
                f"device {self.device}. Use comm_hook='fp16' on CPU/Gloo, or no hook."
            )

    def teardown(self, failed: bool = False) -> None:
        """Drop the DDP wrapper (the process group stays; see ProcessGroupStrategy.teardown) and
        its back-reference from the step module, so no reference cycle keeps the model alive."""
        if self._ddp is not None:
            object.__setattr__(self._ddp.module, "wrapper", None)
        self._ddp = None
        super().teardown(failed)

    # ------------------------------------------------------------------- the model
    def setup_module(self, module: torch.nn.Module) -> Callable[..., Any]:
        """Wrap `module` in DistributedDataParallel; return the callable that runs a training step.

        DDP's gradient hooks fire only for a forward that goes through the wrapper, so the
        training step is run as the forward of a small module that DDP wraps.
        """
        self._watch_collectives()
        refuse_meta(module, self.name, self.device)
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
        except RuntimeError as error:
            if "Expected to have finished reduction in the prior iteration" in str(error):
                raise RuntimeError(self._unused_parameters_message(error)) from error
            raise
        finally:
            self._ddp.require_backward_grad_sync = True  # manual mode turned it off after the step

    def _unused_parameters_message(self, error: RuntimeError) -> str:
        """DDP's error for a parameter without a gradient, with the parameters' names."""
        assert self._ddp is not None
        names = [name.removeprefix("module.") for name, p in self._ddp.module.named_parameters() if p.requires_grad]
        found = re.search(r"did not receive grad for rank \d+: ([\d ,]+)", str(error))
        indices = [int(i) for i in re.findall(r"\d+", found.group(1))] if found else []
        which = ", ".join(names[i] for i in indices if i < len(names)) or "see DDP's message below"
        module = type(self._ddp.module.module).__name__
        return (
            f"DDP: parameters of {module} got no gradient in the previous training step ({which}), so "
            "DistributedDataParallel waited for them and can't start the next step. Expected every "
            "parameter that requires grad to take part in every step's loss. Fix: "
            "Trainer(strategy=DDP(find_unused_parameters=True)) (YAML: strategy: {class_path: "
            "trainer.distributed.DDP, init_args: {find_unused_parameters: true}}), or freeze the parameters "
            "that are not used (requires_grad_(False))."
        )

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

    def prepare_synced_backward(self, output: Any) -> None:
        """What DDP's forward does with gradient sync on, done before the backward instead:
        the window's forwards all ran under no_sync (item-weighted accumulation), and arming
        the reducer at a forward would reduce at the first backward after it."""
        ddp = self._ddp
        if ddp is None or not torch.is_grad_enabled():
            return
        from torch.nn.parallel.distributed import _find_tensors

        ddp.reducer.prepare_for_forward()  # counts the iteration, as a synced forward does
        ddp.require_forward_param_sync = True  # the next forward syncs buffers, as after a synced one
        if ddp.find_unused_parameters and not ddp.static_graph:
            ddp.reducer.prepare_for_backward(list(_find_tensors(output)))
        else:
            ddp.reducer.prepare_for_backward([])

    def no_sync(self, last_micro_batch: bool) -> contextlib.AbstractContextManager[Any]:
        if last_micro_batch or self._ddp is None:
            return _NO_SYNC
        return self._ddp.no_sync()

    def __repr__(self) -> str:
        if not self._bound:
            timeout = "" if self.timeout is None else f", timeout={self.timeout.total_seconds():g}"
            return f"DDP({', '.join(f'{k}={v!r}' for k, v in self.options.items())}, comm_hook={self.comm_hook!r}{timeout})"
        return super().__repr__()


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
