"""`WeightAveraging` and `EMAWeightAveraging`: an average of the weights kept beside training.

Lightning's names and arguments. The average is a `torch.optim.swa_utils.AveragedModel` of
the module, updated after every optimizer step that changed the weights, exactly as a
hand-written loop does it::

    ema = AveragedModel(model, avg_fn=get_ema_avg_fn(0.999), use_buffers=True)
    for batch in loader:
        ...; stepped = optimizer step (amp: False when the GradScaler skipped it)
        if stepped:
            ema.update_parameters(model)

Validation inside `fit` runs with the averaged weights swapped in (and the training weights
swapped back after it); when `fit` ends the module holds the averaged weights. Checkpoints
are laid out as Lightning's: `module` (`state_dict`) holds the averaged weights,
`current_model_state` the training weights, `averaging_state` the average's counter; a
resume with this callback continues both exactly.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from callbacks._averaged import HostCountedAverage
from callbacks._weights import swap_all
from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["WeightAveraging", "EMAWeightAveraging"]


class WeightAveraging(Callback):
    """Keeps a `torch.optim.swa_utils.AveragedModel` of the module during `fit`.

    Keyword arguments go to `AveragedModel` (`avg_fn` or `multi_avg_fn`; neither: the equal
    average of SWA). Contrary to `AveragedModel`, `use_buffers` defaults to True: buffers
    (BatchNorm statistics) are averaged too.

    When the average is updated is `should_update(step_idx=..., epoch_idx=...)`: it is asked
    after every optimizer step that changed the weights (`step_idx`: the zero-based index of
    that step) and after every training epoch (`epoch_idx`); the default updates after every
    step. Override it for another rule.

    Args:
        device: where the average lives; None: beside the module's weights (updating it then
            costs no host synchronization). "cpu" saves accelerator memory at the price of a
            copy from the device after every update.
        use_buffers: average the buffers too (False: they are copied from the module).
        **kwargs: more `AveragedModel` arguments (`avg_fn`, `multi_avg_fn`).

    Example:
        >>> from torch.optim.swa_utils import get_ema_multi_avg_fn
        >>> import callbacks
        >>> averaging = callbacks.WeightAveraging(multi_avg_fn=get_ema_multi_avg_fn(0.99))
        >>> averaging.average_model is None  # made when fit starts
        True
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        self._device = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._ema_decay: float | None = None  # EMAWeightAveraging's decay: the average is that EMA
        self._average_model: AveragedModel | None = None
        self._source: torch.nn.Module | None = None  # the module the average follows
        self._trainer: Any = None  # a weak reference: the Trainer holds this callback
        # Optimizer steps taken when the average was last updated or considered (a step is
        # considered once), and the epoch of the last epoch-end update.
        self._latest_update_step = 0
        self._latest_considered_step = 0
        self._latest_update_epoch = -1
        self._skips_seen = 0
        self._pending: dict[str, Any] | None = None  # a checkpoint's state, until fit starts
        self._swapped = False  # the module holds the average (validation; after fit)
        self._ended = False  # ... because fit ended
        self._fitting = False

    @property
    def average_model(self) -> AveragedModel | None:
        """The `AveragedModel` (made when `fit` starts; None before)."""
        return self._average_model

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update after optimizer step `step_idx` or epoch `epoch_idx` (zero-based;
        the other argument is None). Default: after every step."""
        return step_idx is not None

    # ------------------------------------------------------------------ fit's lifecycle
    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if getattr(trainer.strategy, "name", None) == "fsdp":
            raise ValueError(
                f"{type(self).__name__} keeps a whole copy of the weights, which FSDP shards across ranks. "
                "Expected strategy='ddp' or one device."
            )
        self._trainer = weakref.ref(trainer)
        if self._average_model is None or self._source is not module:
            # Made here, after the module moved to its device and a checkpoint's weights loaded:
            # without a saved average it starts from the weights training starts from.
            kwargs = dict(self._kwargs)
            if self._device is not None and torch.device(self._device) != _device_of(module):
                kwargs["device"] = self._device
            self._average_model = HostCountedAverage(
                module, use_buffers=self._use_buffers, ema_decay=self._ema_decay, **kwargs
            )
            self._average_model.requires_grad_(False)
            self._source = module
            self._swapped = self._ended = False
        elif self._swapped:  # fit again: training continues from its own weights, not the average
            self._swap(module)
            self._ended = False
        if self._pending is not None:
            self._average_model.load_state_dict(self._pending)
            self._pending = None
        self._skips_seen = trainer.state.skipped_steps
        self._fitting = True

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self._skips_seen = trainer.state.skipped_steps  # skips counted before this window

    def on_train_step_end(self, trainer: Trainer, module: Any, stepped: bool) -> None:
        self._consider_step(trainer, module, stepped)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        epoch = trainer.current_epoch
        if epoch > self._latest_update_epoch and self.should_update(epoch_idx=epoch):
            self._update(module)
            self._latest_update_epoch = epoch

    def on_validation_epoch_start(self, trainer: Trainer, module: Any) -> None:
        if self._fitting and not self._swapped:
            self._swap(module)

    def on_validation_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self._fitting and self._swapped:
            self._swap(module)

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        if self._swapped and not self._ended:  # interrupted during validation: training weights back
            self._swap(module)

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        """Training ends: the module takes the averaged weights (the training weights are kept
        aside, for checkpoints written from now on and for a later `fit` that continues)."""
        if self._average_model is not None and not self._swapped:
            self._swap(module)
        self._ended = True
        self._fitting = False

    def teardown(self, trainer: Trainer, module: Any, stage: str) -> None:
        if stage == "fit":
            if self._swapped and not self._ended:  # fit failed during a validation
                self._swap(module)
            self._fitting = False

    # ---------------------------------------------------------------------- checkpoints
    # A checkpoint is laid out as Lightning's: `module` (Lightning: `state_dict`) holds the
    # averaged weights, what evaluation and export want; `current_model_state` the training
    # weights and `averaging_state` the average's own counter, which a resume restores.
    def state_dict(self) -> dict[str, Any]:
        self._catch_up()
        return {
            "latest_update_step": self._latest_update_step,
            "latest_considered_step": self._latest_considered_step,
            "latest_update_epoch": self._latest_update_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._latest_update_step = int(state.get("latest_update_step", 0))
        self._latest_considered_step = int(state.get("latest_considered_step", self._latest_update_step))
        self._latest_update_epoch = int(state.get("latest_update_epoch", -1))

    def on_save_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict[str, Any]) -> None:
        average = self._average_model
        if average is None or not isinstance(checkpoint.get("module"), dict):
            return
        # What the average's copy of the module holds: the average, or while swapped (validation,
        # after fit) the training weights, the module holding the average.
        copy = dict(zip(module.state_dict().keys(), average.module.state_dict().values()))
        other = {k: copy.get(k, v) for k, v in checkpoint["module"].items()}
        if self._swapped:
            checkpoint["current_model_state"] = other
        else:
            checkpoint["current_model_state"], checkpoint["module"] = checkpoint["module"], other
        checkpoint["averaging_state"] = {
            k: v for k, v in average.state_dict().items() if not k.startswith("module.")
        }

    def on_load_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict[str, Any]) -> None:
        averaged = checkpoint.get("module", checkpoint.get("state_dict"))
        current = checkpoint.get("current_model_state")
        if current is None or not isinstance(averaged, dict) or "averaging_state" not in checkpoint:
            return  # not written with weight averaging: the average starts from the restored weights
        state = {"module." + k: v for k, v in averaged.items()}
        state.update(checkpoint["averaging_state"])
        if self._average_model is not None and self._fitting:
            self._average_model.load_state_dict(state)
        else:
            self._pending = state  # loaded when fit starts, once the average exists
        module.load_state_dict(current)  # training continues from the training weights

    # ------------------------------------------------------------------------ internals
    def _consider_step(self, trainer: Trainer, module: Any, stepped: bool) -> None:
        step = trainer.global_step
        if step <= self._latest_considered_step:
            return  # already considered (a checkpoint written earlier in this step caught up)
        self._latest_considered_step = step
        if stepped and step > self._latest_update_step and self.should_update(step_idx=step - 1):
            self._update(module)
            self._latest_update_step = step

    def _catch_up(self) -> None:
        """A checkpoint written after an optimizer step by a callback listed before this one
        (ModelCheckpoint's `on_train_step_end`) holds the average updated for that step, as
        the uninterrupted run's average is; the hook that follows then does nothing."""
        trainer, module = self._trainer() if self._trainer is not None else None, self._source
        if not self._fitting or trainer is None or module is None or self._swapped:
            return
        if trainer.global_step <= self._latest_considered_step:
            return
        automatic = getattr(module, "automatic_optimization", True)
        stepped = trainer.state.skipped_steps == self._skips_seen if automatic else True
        self._consider_step(trainer, module, stepped)

    def _update(self, module: Any) -> None:
        assert self._average_model is not None
        self._average_model.update_parameters(module)

    def _swap(self, module: Any) -> None:
        """The average in (or out), whole: Ctrl-C waits for the end, an error puts every
        tensor back, so no checkpoint ever holds a mix of the two sets of weights."""
        assert self._average_model is not None
        trainer = self._trainer() if self._trainer is not None else None
        with trainer.uninterruptible() if trainer is not None else contextlib.nullcontext():
            swap_all(list(zip(_tensors(self._average_model.module), _tensors(module))))
            self._swapped = not self._swapped


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights: `avg = decay * avg + (1 - decay) * w`.

    Lightning's `EMAWeightAveraging`, the same arguments and the same rule for when to update:
    after every `update_every_n_steps`-th optimizer step (zero-based index divisible by it),
    from step `update_starting_at_step` on (None: from the first); with
    `update_starting_at_epoch=e`, also after every epoch from epoch `e` on.

    Example:
        >>> import callbacks
        >>> ema = callbacks.EMAWeightAveraging(decay=0.99, update_every_n_steps=5, update_starting_at_step=10)
        >>> [ema.should_update(step_idx=i) for i in (9, 10, 11, 15)]
        [False, True, False, True]
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMAWeightAveraging(decay=...) expected a value in [0, 1]. Received: {decay!r}.")
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.decay = decay
        self._ema_decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        if epoch_idx is not None:
            return self.update_starting_at_epoch is not None and epoch_idx >= self.update_starting_at_epoch
        return False


def _tensors(module: torch.nn.Module) -> Any:
    return itertools.chain(module.parameters(), module.buffers())


def _device_of(module: torch.nn.Module) -> torch.device:
    first = next(itertools.chain(module.parameters(), module.buffers()), None)
    return first.device if first is not None else torch.device("cpu")
