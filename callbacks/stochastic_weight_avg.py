"""`StochasticWeightAveraging`: Lightning 2.6's SWA callback, with its schedule and its final weights.

From the SWA start epoch the learning rate follows `torch.optim.swa_utils.SWALR` and, at the
start of every epoch of the SWA window, the weights join an equal average. When training
ends the module takes the averaged weights; a module with BatchNorm then has its statistics
recomputed over one pass of the training data, as Lightning's extra epoch does (see
docs/weight_averaging.md for the exact schedule and the hand-written loop it equals).

That final pass and step: `_swa_extra_epoch.py`; the argument check: `_swa_arguments.py`.
"""

from __future__ import annotations
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel

from trainer import Callback
from trainer.utilities import rank_zero_info, rank_zero_warn

from callbacks._swa_arguments import _check_arguments
from callbacks._swa_extra_epoch import ExtraEpoch, _parameters, _training_loader
from callbacks._weights import Rollback, copy_all
from callbacks.weight_averaging import _device_of

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["StochasticWeightAveraging"]

AvgFn = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]


class StochasticWeightAveraging(ExtraEpoch, Callback):
    """Lightning's Stochastic Weight Averaging: an equal average of the weights over the last epochs.

    With `max_epochs=E`, the SWA window is the epochs `swa_start` to `E - 1` (zero-based),
    `swa_start = swa_epoch_start - 1` for an int, `int(swa_epoch_start * E) - 1` for a float
    (never below 0). At the start of the window the optimizer's scheduler is replaced by
    `SWALR(swa_lrs, annealing_epochs, annealing_strategy)`, stepped once per epoch; at the
    start of every epoch of the window the weights join the average (so the first average is
    the weights the window starts from, and the last epoch's training is not in it). When
    fit ends the module takes the average's parameters; with BatchNorm layers their
    statistics are then recomputed over one pass of the training data, and the optimizer
    steps once more with the gradients of the last training step unless a validation
    cleared them (what Lightning's extra epoch does). The exact schedule, and the loop it
    equals bit for bit, are in docs/weight_averaging.md.

    Args:
        swa_lrs: the SWA learning rate: one float for every parameter group, or a list with
            one per group.
        swa_epoch_start: an int (the epoch, counted from 1) or a float in [0, 1] (a fraction
            of `max_epochs`).
        annealing_epochs: epochs over which the learning rate moves to `swa_lrs`.
        annealing_strategy: "cos" or "linear".
        avg_fn: `avg_fn(averaged, current, n_averaged) -> tensor`; None: the equal average
            `averaged + (current - averaged) / (n_averaged + 1)` (Lightning's `avg_fn`).
        device: where the average is kept (default the CPU); None: beside the module.

    Raises:
        ValueError: an argument outside the accepted values (all of them are named).

    Example:
        >>> import callbacks
        >>> swa = callbacks.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=3)
        >>> swa.swa_start  # zero-based: the third epoch
        2
        >>> try:
        ...     callbacks.StochasticWeightAveraging(swa_lrs=-1.0, annealing_strategy="cosine")
        ... except ValueError as error:
        ...     print(str(error)[:60])
        StochasticWeightAveraging got invalid arguments: swa_lrs=-1.
    """

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AvgFn | None = None,
        device: torch.device | str | None = torch.device("cpu"),
    ) -> None:
        problems = _check_arguments(swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy, avg_fn, device)
        if problems:
            raise ValueError(
                f"StochasticWeightAveraging got {'invalid arguments' if len(problems) > 1 else 'an invalid argument'}: "
                + "; ".join(problems) + "."
            )
        self._swa_lrs: float | list[float] = list(swa_lrs) if isinstance(swa_lrs, (list, tuple)) else float(swa_lrs)
        self._swa_epoch_start = swa_epoch_start
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn: AvgFn = avg_fn or self.avg_fn
        self._device = torch.device(device) if isinstance(device, str) else device
        self._start = swa_epoch_start - 1 if isinstance(swa_epoch_start, int) else None  # zero-based, at fit start
        self._max_epochs = -1  # the epochs this fit trains; -1: no limit
        self._model_contains_batch_norm = False
        self._average_model: AveragedModel | None = None
        self._source: Any = None  # the module the average follows
        self._initialized = False
        self._swa_scheduler: SWALR | None = None
        self._scheduler_state: dict[str, Any] | None = None
        self._replaced: tuple[Any, Any] | None = None  # (the Trainer's scheduler config, the scheduler it held)
        self._latest_update_epoch = -1
        self._stepped_epoch = -1  # SWALR stepped by this callback (no scheduler config to hold it)
        self._finalized_epoch = -1
        self._rollback: tuple[Rollback, Any] | None = None  # while the final change runs: (state, last gradients)
        self._batch_idx = -1
        self._last_grads: list[torch.Tensor | None] | None = None  # the last step's gradients (BatchNorm pass)
        self.momenta: dict[nn.modules.batchnorm._BatchNorm, float | None] = {}

    # ------------------------------------------------------------------ Lightning's names
    @property
    def swa_start(self) -> int:
        """The first epoch of the SWA window (zero-based); a float start is resolved when fit starts."""
        if self._start is None:
            raise RuntimeError("swa_epoch_start was given as a fraction of max_epochs: swa_start is known once fit starts.")
        return max(self._start, 0)

    @property
    def swa_end(self) -> int | float:
        """The last epoch of the SWA window (zero-based); inf without an epoch limit."""
        return math.inf if self._max_epochs == -1 else self._max_epochs - 1

    @property
    def n_averaged(self) -> torch.Tensor | None:
        """How many weights the average holds (None until the SWA window starts, as Lightning's)."""
        return None if self._average_model is None or not self._initialized else self._average_model.n_averaged

    @property
    def average_model(self) -> AveragedModel | None:
        """The `AveragedModel` whose `.module` holds the average (made when fit is set up)."""
        return self._average_model

    @staticmethod
    def avg_fn(averaged_model_parameter: torch.Tensor, model_parameter: torch.Tensor, num_averaged: torch.Tensor) -> torch.Tensor:
        """The equal average, written as Lightning writes it (bit for bit)."""
        return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in pl_module.modules())

    @staticmethod
    def update_parameters(average_model: nn.Module, model: nn.Module, n_averaged: torch.Tensor, avg_fn: AvgFn) -> None:
        """Fold `model`'s parameters into `average_model`'s with `avg_fn` (the first time: copy
        them) and add one to `n_averaged` in place. Called at the start of every epoch of the
        SWA window, with Lightning's arguments: a subclass may override it."""
        for averaged, current in zip(average_model.parameters(), model.parameters()):
            target = averaged.detach()
            value = current.detach().to(target.device)
            target.copy_(value if int(n_averaged) == 0 else avg_fn(target, value, n_averaged.to(target.device)))
        n_averaged += 1

    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        """Copy the parameters (not the buffers) of one module into another: all of them, or
        (on an error or an interrupt inside) none."""
        copy_all(list(zip(dst_pl_module.parameters(), src_pl_module.parameters())))

    # ------------------------------------------------------------------------ fit
    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if getattr(trainer.strategy, "name", None) == "fsdp":
            raise ValueError("StochasticWeightAveraging keeps a whole copy of the weights, which FSDP shards across "
                             "ranks. Expected strategy='ddp' or one device.")
        if self._average_model is None or self._source is not module:
            # Before the module moves to its device, as Lightning copies it; a checkpoint's average loads into it.
            self._average_model = AveragedModel(module, avg_fn=self._avg_fn, use_buffers=False)
            self._average_model.requires_grad_(False)
            self._source = module
            self._initialized, self._swa_scheduler, self._replaced = False, None, None

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if len(trainer.optimizers) != 1:
            raise ValueError(f"StochasticWeightAveraging works with one optimizer; configure_optimizers() of "
                             f"{type(module).__name__} returned {len(trainer.optimizers)}. Expected exactly one.")
        if len(trainer.lr_scheduler_configs) > 1:
            raise ValueError(f"StochasticWeightAveraging replaces one LR scheduler; configure_optimizers() returned "
                             f"{len(trainer.lr_scheduler_configs)}. Expected at most one.")
        groups = len(trainer.optimizers[0].param_groups)
        if isinstance(self._swa_lrs, list) and len(self._swa_lrs) != groups:
            raise ValueError(f"StochasticWeightAveraging(swa_lrs={self._swa_lrs!r}) has {len(self._swa_lrs)} values; the "
                             f"optimizer has {groups} parameter group(s). Expected one value per group, or one float.")
        self._max_epochs = _epoch_limit(trainer)
        if isinstance(self._swa_epoch_start, float):
            if self._max_epochs == -1:
                raise ValueError(
                    f"StochasticWeightAveraging(swa_epoch_start={self._swa_epoch_start}) is a fraction of max_epochs, "
                    "but this fit has no epoch limit. Expected swa_epoch_start as an int (the epoch), or max_epochs.")
            self._start = int(self._max_epochs * self._swa_epoch_start) - 1
        self._model_contains_batch_norm = self.pl_module_contains_batch_norm(module)

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        epoch = trainer.current_epoch
        in_window = self.swa_start <= epoch <= self.swa_end
        if in_window and not self._initialized:
            self._initialize(trainer, module, epoch)
        if in_window and epoch > self._latest_update_epoch:
            assert self._average_model is not None
            with torch.no_grad():
                self.update_parameters(self._average_model.module, module, self._average_model.n_averaged, self._avg_fn)
            self._latest_update_epoch = epoch

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self._batch_idx = batch_idx

    def on_before_zero_grad(self, trainer: Trainer, module: Any, optimizer: Any) -> None:
        # The gradients Lightning's extra epoch steps with: those of the last step of the last epoch.
        if not self._model_contains_batch_norm or trainer.current_epoch != self.swa_end:
            return
        if self._batch_idx + 1 >= trainer.num_training_batches or math.isinf(trainer.num_training_batches):
            self._last_grads = [None if p.grad is None else p.grad.detach().clone() for p in _parameters(optimizer)]

    def on_validation_start(self, trainer: Trainer, module: Any) -> None:
        if not trainer.sanity_checking:
            self._last_grads = None  # Lightning clears the gradients before validating (on_validation_model_zero_grad)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        epoch = trainer.current_epoch
        if self._swa_scheduler is not None and self._replaced is None and module.automatic_optimization and epoch > self._stepped_epoch:
            self._swa_scheduler.step()  # no scheduler config of the Trainer's holds it: stepped here, once per epoch
            self._stepped_epoch = epoch

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        # Lightning counts an epoch cut short (max_steps, a stop request) as completed.
        average, epoch = self._average_model, trainer.current_epoch + (1 if trainer.state.batches_done else 0)
        finished = self._max_epochs == -1 or epoch == self.swa_end + 1
        if average is None or not finished or epoch == self._finalized_epoch:
            return  # stopped before the window's last epoch: the training weights stay, as in Lightning
        if int(average.n_averaged) == 0:
            self._finalized_epoch = epoch
            rank_zero_warn("StochasticWeightAveraging: training ended before the SWA window started, so nothing was "
                           "averaged; the module keeps its trained weights.")
            return
        # The transfer, the BatchNorm pass and its last step are one change: an interrupt or an error
        # anywhere in it puts everything back (on_exception), so the checkpoint written then holds the
        # state before it and a resume runs it whole, as the uninterrupted run did.
        self._rollback = (Rollback(module, _training_loader(trainer)), self._last_grads)
        with trainer.uninterruptible():  # the module takes the average whole: a checkpoint never holds a mix
            self.transfer_weights(average.module, module)
        stopped = (trainer.max_steps is not None and trainer.global_step >= trainer.max_steps) or trainer.should_stop
        if self._model_contains_batch_norm and self._max_epochs != -1 and not stopped:
            self._recompute_batch_norm(trainer, module)
        with trainer.uninterruptible():
            if self._model_contains_batch_norm and self._max_epochs != -1 and not stopped:
                self._step_with_last_gradients(trainer, module)
            self._last_grads = None
            self._finalized_epoch, self._rollback = epoch, None

    def on_exception(self, trainer: Trainer, module: Any, exception: BaseException) -> None:
        rollback, self._rollback = self._rollback, None
        if rollback is not None:  # the final change was cut short: none of it happened
            rollback[0].restore()
            self._last_grads = rollback[1]

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        average = self._average_model
        return {  # Lightning's four keys, then ours
            "n_averaged": 0 if average is None else int(average.n_averaged),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if average is None else average.module.state_dict(),
            "last_step_gradients": self._last_grads,
            "scheduler_stepped_epoch": self._stepped_epoch,
            "finalized_epoch": self._finalized_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._latest_update_epoch = int(state["latest_update_epoch"])
        self._scheduler_state = state["scheduler_state"]
        average = self._average_model
        if average is not None and state.get("average_model_state") is not None:
            average.module.load_state_dict(state["average_model_state"])
            average.n_averaged.fill_(int(state["n_averaged"]))
        if self._swa_scheduler is not None and self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        grads = state.get("last_step_gradients")
        self._last_grads = None if grads is None else list(grads)
        self._stepped_epoch = int(state.get("scheduler_stepped_epoch", -1))
        self._finalized_epoch = int(state.get("finalized_epoch", -1))

    def on_save_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict[str, Any]) -> None:
        """`lr_schedulers` holds SWALR's state where Lightning's does; the Trainer's own entry keeps
        the scheduler `configure_optimizers` made (a resume restores into that one, then swaps again)."""
        if self._swa_scheduler is None or not isinstance(checkpoint.get("schedulers"), list):
            return
        if self._replaced is not None and checkpoint["schedulers"]:
            original = self._replaced[1]
            checkpoint["schedulers"][0] = {"class": type(original).__qualname__, "state": original.state_dict()}
        elif self._replaced is None and isinstance(checkpoint.get("lr_schedulers"), list):
            checkpoint["lr_schedulers"] = [*checkpoint["lr_schedulers"], self._swa_scheduler.state_dict()]

    # ------------------------------------------------------------------- internals
    def _initialize(self, trainer: Trainer, module: Any, epoch: int) -> None:
        self._initialized = True
        assert self._average_model is not None
        self._average_model.to(self._device or _device_of(module))
        optimizer = trainer.optimizers[0]
        lrs = self._swa_lrs if isinstance(self._swa_lrs, list) else [self._swa_lrs] * len(optimizer.param_groups)
        for lr, group in zip(lrs, optimizer.param_groups):
            group["initial_lr"] = lr
        bn_epoch = 1 if self._model_contains_batch_norm and self._max_epochs != -1 else 0  # Lightning's max_epochs + 1
        last_epoch = self._max_epochs + bn_epoch if self._annealing_strategy == "cos" and self._max_epochs != -1 else -1
        self._swa_scheduler = SWALR(optimizer, swa_lr=lrs, anneal_epochs=self._annealing_epochs,  # type: ignore[arg-type]
                                    anneal_strategy=self._annealing_strategy, last_epoch=last_epoch)  # type: ignore[arg-type]
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        elif epoch != self.swa_start:
            rank_zero_warn("StochasticWeightAveraging starts after swa_start without a checkpoint's SWA state: its "
                           "learning-rate annealing starts here.")
        configs = trainer.lr_scheduler_configs
        if configs:
            config = configs[0]
            if config.interval != "epoch" or config.frequency != 1:
                rank_zero_warn(f"StochasticWeightAveraging steps SWALR once per epoch; the scheduler it replaces stepped "
                               f"every {config.frequency} {config.interval}(s).")
            rank_zero_info("Swapping scheduler `%s` for `SWALR`", type(config.scheduler).__name__)
            self._replaced = (config, config.scheduler)
            config.scheduler, config.interval, config.frequency = self._swa_scheduler, "epoch", 1
            config.monitor, config.strict, config.name = None, True, None


def _epoch_limit(trainer: Trainer) -> int:
    """The epochs this fit trains (the Trainer's rule: neither limit given means one); -1: none."""
    if trainer.max_epochs is not None:
        return int(trainer.max_epochs)
    return -1 if trainer.max_steps is not None or getattr(trainer.args, "max_time", None) is not None else 1
