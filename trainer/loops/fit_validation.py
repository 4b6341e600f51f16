"""Validation inside fit: the sanity check before training, and the validations of the
epochs (`val_check_interval`, epoch ends), with the random streams each leaves as it found them
or as a hand-written loop's evaluation would (`isolate_validation_rng`).

The part of `FitLoop` (fit.py) that runs them; `FitLoop` decides when.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trainer._utils import rng_state, set_rng_state
from trainer.module import own_hook
from trainer.loops.context import Evaluation, RunContext, module_of
from trainer.loops.monitors import MonitorCheck

__all__ = ["FitValidation", "isolated_rng"]


@contextlib.contextmanager
def isolated_rng() -> Iterator[None]:
    """Run a block without touching the training's random streams: the sanity check always,
    every validation with `isolate_validation_rng=True` (then a run that validates every n
    steps has the weights of one that never validates, but not those of a hand-written
    `for epoch: train(); evaluate()` loop, whose evaluation `DataLoader` draws its base seed
    from torch's generator)."""
    saved = rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)


class FitValidation:
    """The part of `FitLoop` (fit.py) that runs validation inside fit: the sanity check, a
    validation of the epochs, and the random state a checkpoint written meanwhile holds."""

    if TYPE_CHECKING:
        context: RunContext
        evaluation: Evaluation
        val_loader: Any
        val_limit: int | None | list[int | None]
        rng_before_validation: dict[str, Any] | None
        monitors: MonitorCheck
        val_loaded_epoch: float

        def _measure_val(self) -> None: ...

    def sanity_check(self) -> None:
        """`num_sanity_val_steps` validation batches before training: nothing is logged, no
        callback acts on them (`trainer.sanity_checking`), no random stream moves."""
        context, steps = self.context, self.context.args.num_sanity_val_steps
        if self.val_loader is None or steps == 0:
            return
        limit: int | None | list[int | None]
        if isinstance(self.val_limit, list):
            limit = [each if steps == -1 else (steps if each is None else min(steps, each)) for each in self.val_limit]
        else:
            limit = self.val_limit if steps == -1 else (steps if self.val_limit is None else min(steps, self.val_limit))
        latest, prog_bar = dict(context.metrics.latest), set(context.metrics.prog_bar)
        context.sanity_checking = True
        try:
            with isolated_rng():  # its hooks' draws too, as Lightning's
                context.call("on_sanity_check_start")
                self.evaluation.run(self.val_loader, "validation", limit, during_fit=True)
                context.call("on_sanity_check_end")
            names = set(context.metrics.latest)
        finally:
            context.sanity_checking = False
            context.metrics.clear_latest()  # training starts a new callback_metrics dict, as Lightning's
            context.metrics.latest, context.metrics.prog_bar = latest, prog_bar
        self.monitors.after_validation(names, context)

    def reload_val(self) -> None:
        """`reload_dataloaders_every_n_epochs=n`: a validation n or more epochs after the val
        loader's last load asks for it again, as Lightning's validation does (its draws are the
        run's: Lightning's reload happens inside the validation, not isolated)."""
        context, n = self.context, self.context.args.reload_dataloaders_every_n_epochs
        if not n or context.state.epoch - self.val_loaded_epoch < n:
            return
        reloaded = context.reload_loader(module_of(context), "val")
        self.val_loaded_epoch = context.state.epoch
        if reloaded is not None:
            (val_loader,) = reloaded
            self.val_loader = val_loader if context.args.limit_val_batches != 0 else None
            self._measure_val()

    def validate(self, epoch_end: bool = False) -> None:
        """Validation inside fit (epoch end, val_check_interval): it draws from the random
        streams as the user's own loop would, unless `isolate_validation_rng=True`.

        Until it reaches `on_validation_end` it is pending: a checkpoint written meanwhile (a
        Ctrl-C, a callback's save) holds the random state it began with, and a resume from
        that file runs it again, so its draws happen exactly once either way. From
        `on_validation_end` on it counts as done (the epoch's end validation too: a resume
        from a checkpoint written there does not run it again).
        """
        context, state = self.context, self.context.state
        isolate = context.args.isolate_validation_rng
        self.rng_before_validation = rng_state()
        state.validation_pending = True
        module_of(context).on_validation_model_zero_grad()  # Lightning's, before a validation in fit
        self.reload_val()  # reload_dataloaders_every_n_epochs: Lightning's validation asks for its loader here

        def complete() -> None:
            state.validation_pending = False
            if epoch_end:
                state.epoch_end_validated = True
            if not isolate:  # from here on a checkpoint holds the streams as validation left them
                self.rng_before_validation = None

        self.monitors.due.add("validation_end")
        try:
            self.evaluation.run(self.val_loader, "validation", self.val_limit, before_end=complete, during_fit=True)
        except BaseException:
            if state.validation_pending or isolate:  # the cut is the validation's start
                set_rng_state(self.rng_before_validation)
            raise
        if isolate:
            set_rng_state(self.rng_before_validation)
        self.rng_before_validation = None
        self._release_gradients()
        if not self.monitors.done:
            self.monitors.after_validation((), context)

    def _release_gradients(self) -> None:
        """Under automatic optimization: gradients the validation's hooks made (a callback's
        own backward, for a saliency map) are released before the next step, as Lightning's
        zero_grad before the next window's first backward releases them (an
        `optimizer_zero_grad` override or an `on_before_zero_grad` hook puts the zeroing at
        that place itself: the hook sees the gradients Lightning's would)."""
        module, optimizers = module_of(self.context), self.context.optimizers
        if optimizers is None or not module.automatic_optimization or own_hook(module, "optimizer_zero_grad") \
                or self.context.hooks.wants_outside_package("on_before_zero_grad"):
            return
        for optimizer in optimizers.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def rng_for_checkpoint(self) -> dict[str, Any] | None:
        """The random state a checkpoint written now must hold (None: the current one)."""
        return self.rng_before_validation
