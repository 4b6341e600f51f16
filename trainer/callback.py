"""`Callback`: optional behaviour hooked into the loop.

Hooks are named `on_<scope>_<start|end>` (plus `setup`/`teardown`) and receive
`(trainer, module, ...)`. The dispatcher (`trainer/loops/hooks.py`) calls, for each hook,
only the callbacks whose class overrides it, so a hook nobody overrides costs nothing.
Callbacks run before the module's hook of the same name, as in Lightning; the exceptions
(epoch ends, loading a checkpoint) are listed in docs/hooks.md.

Example:
    >>> from trainer import Callback
    >>> class PrintEpoch(Callback):
    ...     def on_train_epoch_end(self, trainer, module):
    ...         print("finished epoch", trainer.current_epoch)
    >>> PrintEpoch().state_dict()
    {}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.logging.metrics import MonitorError
from trainer.loops.hooks import HOOKS, CallbackBase

if TYPE_CHECKING:  # the Trainer never imports this file, so naming it here makes no cycle
    from trainer.trainer import Trainer

__all__ = ["Callback", "Checkpoint", "HOOKS", "MonitorError"]


class Callback(CallbackBase):
    """Base class: override the hooks you need; the others cost nothing.

    Every hook receives `(trainer, module, ...)`; the order in which the Trainer calls them
    is the table in docs/hooks.md (Lightning's order). A callback with state overrides
    `state_dict`/`load_state_dict` (and `state_key` when two instances of a class differ);
    the checkpoint holds it under that key.
    """

    # ------------------------------------------------------------------ run lifecycle
    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        """Before `fit`/`validate`/`test`/`predict` starts (`stage` names which)."""

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        """After it ended (also when it failed)."""

    def monitored_metrics(self, trainer: Trainer) -> dict[str, str]:
        """The metrics this callback must find logged, each with the point where it first reads
        them: "validation_end" or "train_epoch_end". `fit` checks every callback's (with each
        LR scheduler's `monitor`) together once the run's metric names are known, and reports
        every missing one at once. Default: none."""
        return {}

    def on_fit_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_fit_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_sanity_check_start(self, trainer: Trainer, module: Any) -> None:
        """Before the `num_sanity_val_steps` validation batches that precede training."""

    def on_sanity_check_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_train_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_train_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None: ...

    # ----------------------------------------------------------------------- training
    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the batch; for a window's last micro-batch, after its optimizer step."""

    def on_before_backward(self, trainer: Trainer, module: Any, loss: Any) -> None: ...
    def on_after_backward(self, trainer: Trainer, module: Any) -> None: ...
    def on_before_optimizer_step(self, trainer: Trainer, module: Any, optimizer: Any) -> None:
        """Before unscaling and clipping (gradients are still scaled under amp)."""

    def on_before_zero_grad(self, trainer: Trainer, module: Any, optimizer: Any) -> None:
        """After the optimizer step, before its gradients are cleared (automatic optimization)."""

    def on_train_step_end(self, trainer: Trainer, module: Any, stepped: bool) -> None:
        """After an optimizer step and `zero_grad` (`stepped` is False for a skipped step; a
        fused optimizer skips on the device, unknown to the host, so its steps pass True and
        its skips are counted in `skipped_steps` at the next logging step)."""

    # --------------------------------------------------------------------- evaluation
    def on_validation_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_validation_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_validation_epoch_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_validation_epoch_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_validation_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_test_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_test_epoch_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_test_epoch_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_test_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_predict_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_predict_epoch_start(self, trainer: Trainer, module: Any) -> None: ...
    def on_predict_epoch_end(self, trainer: Trainer, module: Any) -> None: ...
    def on_predict_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    # -------------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict[str, Any]) -> None:
        """Called with the checkpoint dict before it is written; may add entries."""

    def on_load_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict[str, Any]) -> None:
        """Called with a loaded checkpoint dict before training resumes."""


class Checkpoint(Callback):
    """Base class of callbacks that write checkpoints (Lightning's `Checkpoint`), such as
    `callbacks.ModelCheckpoint`: the Trainer runs them after every other callback, so a file
    written in a hook holds what the others did in it (an EMA update in `on_train_batch_end`).
    """

    saves_checkpoints = True

