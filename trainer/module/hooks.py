"""`ModuleHooks`: every hook a `trainer.Module` may override, with Lightning's defaults.

The Trainer calls a hook only where docs/hooks.md says, and only when the module (or a
callback) overrides it: which ones are overridden is decided once per `fit`, so the defaults
here cost nothing per step. `Module` derives from this class; subclass `Module`, not this.

Example:
    >>> import torch
    >>> from trainer import Module
    >>> class WarmUp(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.net = torch.nn.Linear(2, 1)
    ...     def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
    ...         for group in optimizer.param_groups:  # linear warm-up over 10 steps
    ...             group["lr"] = 0.1 * min(1.0, (self.trainer.global_step + 1) / 10)
    ...         optimizer.step(closure=optimizer_closure)
    >>> WarmUp.optimizer_step is not Module.optimizer_step
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainer._utils import move_to_device

__all__ = ["ModuleHooks"]


class ModuleHooks(torch.nn.Module):
    """The hooks of `trainer.Module`: lifecycle notifications (do nothing by default) and the
    loop's overridable steps (Lightning's defaults)."""

    #: `prepare_data` runs on each machine's local rank 0 (False: on global rank 0 only).
    prepare_data_per_node: bool = True

    # ------------------------------------------------------------------- lifecycle hooks
    # The order in which the Trainer calls them is the table in docs/hooks.md.
    def prepare_data(self) -> None:
        """Download or preprocess once per machine, before `setup` (the other ranks wait);
        don't set state here that every rank needs (use `setup`)."""

    def configure_callbacks(self) -> Any:
        """Callbacks this module always wants (a callback or a sequence): added to the
        Trainer's when a run starts, replacing those of the same class, as Lightning does."""
        return []

    def configure_model(self) -> None:
        """Create layers here (once, after `setup` and before `configure_optimizers`) to build
        them when the run starts rather than in `__init__`."""

    def setup(self, stage: str) -> None:
        """Before fit/validate/test/predict (`stage`), before the model is moved or wrapped."""

    def teardown(self, stage: str) -> None: ...
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: Any) -> None: ...
    def on_before_zero_grad(self, optimizer: Any) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add the module's own state (a carried hidden state, a running statistic) to
        `checkpoint` before it is written; values must be tensors or plain data."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read back what `on_save_checkpoint` added (called when a run resumes)."""

    # ------------------------------------------------- the automatic loop's overridable steps
    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Callable[[], Any] | None = None
    ) -> None:
        """Step `optimizer` at an accumulation window's last batch (automatic optimization).

        `optimizer_closure` runs that batch's `training_step` and backward; `optimizer.step(
        closure=optimizer_closure)` runs it, then unscales, clips and steps through the
        Trainer's precision. Override to change the learning rate first (a warm-up), or to
        skip a step (run `optimizer_closure()` alone then).
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        """Clear the gradients. Overridden, it runs where Lightning runs it: after the `training_step`
        of a window's first batch, before its backward (otherwise the Trainer zeroes after each step)."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one LR scheduler when its interval and frequency say so; `metric` is the monitored
        value for a ReduceLROnPlateau, else None. Override for schedulers that are not torch's."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: float | int | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        """Clip before each optimizer step (after unscaling); receives the Trainer's settings."""
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)

    def clip_gradients(
        self, optimizer: Any, gradient_clip_val: float | int | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        raise NotImplementedError  # defined by Module

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """The backward pass of a loss (automatic optimization and `manual_backward`)."""
        loss.backward(*args, **kwargs)

    # ------------------------------------------------------------------- batches and modes
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it is moved to the device (e.g. augment on the CPU)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to `device` (tensors inside lists, tuples, dicts and dataclasses)."""
        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch once it is on the device (e.g. augment on the GPU)."""
        return batch

    def on_validation_model_zero_grad(self) -> None:
        """Before a validation inside `fit`: release the gradients (Lightning's hook; after an
        optimizer step they are already released, so only gradients a manual-optimization
        module keeps across batches are affected, as in Lightning)."""
        self.zero_grad(set_to_none=True)

    def on_validation_model_eval(self) -> None:
        """Put the module in eval mode for validation (override to keep a part training)."""
        self.eval()

    def on_validation_model_train(self) -> None:
        """After validation; overridden, it replaces restoring each submodule's mode."""
        self.train()

    def on_test_model_eval(self) -> None:
        """Put the module in eval mode for testing."""
        self.eval()

    def on_test_model_train(self) -> None:
        """After testing; overridden, it replaces restoring each submodule's mode."""
        self.train()

    def on_predict_model_eval(self) -> None:
        """Put the module in eval mode for prediction."""
        self.eval()
