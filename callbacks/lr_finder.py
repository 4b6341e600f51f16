"""`LearningRateFinder`: the learning-rate sweep of `trainer.tuner.lr_find`, run when fit starts (Lightning's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.tuner import LRFinderResult, apply_lr, lr_find
from trainer.utilities.rank_zero import rank_zero_info, rank_zero_warn

from trainer import Callback

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["LearningRateFinder"]


class LearningRateFinder(Callback):
    """Runs the learning-rate range test at `on_fit_start`, on the fit's training data, then
    puts everything back as it was (weights, optimizer, random streams) and, with
    `update_attr=True`, sets the suggestion on the module's `lr`/`learning_rate` (or
    `attr_name`) and on the optimizers' parameter groups, so training continues with it.
    The result is `.optimal_lr` (`.optimal_lr.suggestion()`, `.results`, `.plot()`).

    A resumed fit (`fit(..., ckpt_path=...)`) does not sweep again: its optimizers hold the
    learning rate the run trained with, and the module's attribute takes the saved suggestion.

    Call `self.lr_find(trainer, pl_module)` from another hook (overriding `on_fit_start` to
    do nothing) to sweep at other times, as in Lightning. Skipped with a warning under
    `fast_dev_run`. One process only; docs/tuning.md describes the sweep and its suggestion.

    Args:
        min_lr, max_lr: the range swept.
        num_training_steps: learning rates tried (optimizer steps).
        mode: "exponential" or "linear".
        early_stop_threshold: stop once the smoothed loss exceeds this times the best (None: never).
        update_attr: set the suggestion on the module and the optimizers.
        attr_name: the module's learning-rate attribute (default: `lr` or `learning_rate`).

    Example:
        >>> from callbacks import LearningRateFinder
        >>> finder = LearningRateFinder(min_lr=1e-5, max_lr=1.0, num_training_steps=50)
        >>> finder.optimal_lr is None
        True
    """

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(self, min_lr: float = 1e-8, max_lr: float = 1, num_training_steps: int = 100,
                 mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                 attr_name: str = "") -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"LearningRateFinder(mode={mode!r}) is not supported. Expected one of {self.SUPPORTED_MODES}.")
        if not (0 < min_lr < max_lr) or isinstance(num_training_steps, bool) or not isinstance(num_training_steps, int) \
                or num_training_steps < 2:
            raise ValueError(f"LearningRateFinder expected 0 < min_lr < max_lr and num_training_steps >= 2. Received: "
                             f"min_lr={min_lr!r}, max_lr={max_lr!r}, num_training_steps={num_training_steps!r}.")
        self._min_lr = min_lr
        self._max_lr = max_lr
        self._num_training_steps = num_training_steps
        self._mode = mode
        self._early_stop_threshold = early_stop_threshold
        self._update_attr = update_attr
        self._attr_name = attr_name
        self.optimal_lr: LRFinderResult | None = None
        self._applied_lr: float | None = None  # the suggestion set on the module (saved in checkpoints)
        self._resumed = False  # a checkpoint's state was loaded: its fit resumes, the sweep already ran

    def lr_find(self, trainer: Trainer, pl_module: Any) -> None:
        """Sweep now, on `trainer`'s training data, and keep the result in `optimal_lr`."""
        if trainer.fast_dev_run:
            rank_zero_warn("Skipping learning rate finder since `fast_dev_run` is enabled.")
            return
        datamodule = trainer.datamodule
        if datamodule is None:
            trainer.fit_loop.setup_data()  # as Lightning's sweep: fit's loaders are asked for now
        loader = trainer.train_dataloader if datamodule is None else None
        self.optimal_lr = lr_find(
            trainer, pl_module, loader, datamodule=datamodule, min_lr=self._min_lr, max_lr=self._max_lr,
            num_training=self._num_training_steps, mode=self._mode, early_stop_threshold=self._early_stop_threshold,
            update_attr=self._update_attr, attr_name=self._attr_name,
        )

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self._resumed:
            # The checkpoint's optimizers hold the learning rate the sweep chose and training went on with;
            # sweeping again (from the restored weights) would replace it: the module takes it back instead.
            self._resumed = False
            if self._update_attr and self._applied_lr is not None:
                apply_lr(module, self._applied_lr, self._attr_name)
            rank_zero_info("LearningRateFinder: a resumed fit keeps the learning rate of the run it continues "
                           "(no new sweep).")
            return
        self.lr_find(trainer, module)
        self._applied_lr = None if self.optimal_lr is None else self.optimal_lr.applied_lr

    def state_dict(self) -> dict[str, Any]:
        return {"applied_lr": self._applied_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        applied = state_dict.get("applied_lr")
        self._applied_lr = float(applied) if isinstance(applied, (int, float)) else None
        self._resumed = True
