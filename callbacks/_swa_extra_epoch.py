"""Lightning's extra SWA epoch, as `StochasticWeightAveraging` does it once the module holds the
average: BatchNorm statistics recomputed over one pass of the training data (momentum None: a
cumulative average), then one optimizer step with the last training step's gradients.

`ExtraEpoch` is a base of `StochasticWeightAveraging`, which sets `momenta` and the last gradients.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainer.strategies.base import step_caller

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["ExtraEpoch"]


class ExtraEpoch:
    """The BatchNorm pass and the last step of Lightning's extra SWA epoch (Lightning's method names)."""

    momenta: dict[nn.modules.batchnorm._BatchNorm, float | None]
    _last_grads: list[torch.Tensor | None] | None

    def _recompute_batch_norm(self, trainer: Trainer, module: Any) -> None:
        """One pass of `training_step` over the training data, in train mode, under the
        precision's autocast, with BatchNorm's statistics reset and a cumulative average
        (momentum None); nothing is logged and the weights are not changed."""
        loader = _training_loader(trainer)
        if loader is None:
            return
        self.reset_batch_norm_and_save_state(module)
        batches = trainer.num_training_batches
        step = step_caller(module, "training_step")
        device, was_training = trainer.strategy.device, module.training
        shadowed = {name: vars(module).pop(name) for name in ("log", "log_dict") if name in vars(module)}
        module.log = module.log_dict = _ignore  # nothing from this pass is recorded
        try:
            module.train()
            trainer.strategy.set_epoch(loader, trainer.current_epoch)
            data: Iterator[Any] = iter(loader)
            if not math.isinf(batches):
                data = itertools.islice(data, int(batches))
            for batch_idx, batch in enumerate(data):
                with trainer.precision.autocast():
                    step(_to_device(batch, device), batch_idx)
        finally:
            del module.log, module.log_dict
            vars(module).update(shadowed)
            module.train(was_training)
            self.reset_momenta()

    def _step_with_last_gradients(self, trainer: Trainer, module: Any) -> None:
        """Lightning's extra epoch ends with an optimizer step on gradients it never cleared:
        the last training step's (none when a validation followed that step)."""
        grads, self._last_grads = self._last_grads, None
        if grads is None or not module.automatic_optimization:
            return
        optimizer = trainer.optimizers[0]
        params = _parameters(optimizer)
        for param, grad in zip(params, grads):
            param.grad = None if grad is None else grad.to(param.device)
        precision = trainer.precision
        precision.unscale_gradients(optimizer)
        clip = trainer.args.gradient_clip_val
        if clip:
            precision.clip_gradients(optimizer, clip, trainer.args.gradient_clip_algorithm, params)
        precision.optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)

    def reset_batch_norm_and_save_state(self, pl_module: nn.Module) -> None:
        """Zero the running means, set the variances to one, and make each BatchNorm a cumulative average."""
        self.momenta = {}
        for layer in pl_module.modules():
            if isinstance(layer, nn.modules.batchnorm._BatchNorm) and layer.running_mean is not None:
                assert layer.running_var is not None and layer.num_batches_tracked is not None
                layer.running_mean.zero_()
                layer.running_var.fill_(1)
                layer.num_batches_tracked.zero_()
                self.momenta[layer] = layer.momentum
                layer.momentum = None

    def reset_momenta(self) -> None:
        for layer, momentum in self.momenta.items():
            layer.momentum = momentum


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def _training_loader(trainer: Trainer) -> Any:
    """The loader fit trains on, as the Trainer prepared it (Lightning's `trainer.train_dataloader`)."""
    return trainer.train_dataloader


def _parameters(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return type(batch)({k: _to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_to_device(v, device) for v in batch))
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        return type(batch)(_to_device(v, device) for v in batch)  # type: ignore[call-arg]
    return batch
