"""Manual optimization as a `Module` reaches it: its optimizers and schedulers, `manual_backward`,
gradient clipping and `toggle_optimizer`, all through the Trainer's run (docs/manual_optimization.md).
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.module.link import ModuleLink

__all__ = ["ModuleOptimization"]


class ModuleOptimization(ModuleLink):
    """`Module`'s optimizers and manual optimization (Lightning's method names)."""

    #: False: `training_step` steps the optimizers itself (`self.optimizers()`,
    #: `self.manual_backward`, `opt.step()`), as in Lightning; see docs/manual_optimization.md.
    automatic_optimization: bool = True

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizers of `configure_optimizers`, stepping through the Trainer's precision.

        One optimizer is returned as is (wrapped), several as a list in the order given;
        `use_pl_optimizer=False` (Lightning's) gives the torch optimizers themselves, which
        step without the precision (no GradScaler) and without the step count.
        """
        if not use_pl_optimizer:
            raw = list(self._link().optimizer_setup().optimizers)
            return raw[0] if len(raw) == 1 else raw
        managed = self._link().manual_optimization().managed
        return managed[0] if len(managed) == 1 else managed

    def lr_schedulers(self) -> Any:
        """The LR schedulers of `configure_optimizers`: None, one, or a list."""
        schedulers = [config.scheduler for config in self._link().optimizer_setup().schedulers]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """`loss.backward()` through the Trainer: scaled under amp, hooks called."""
        self._link().manual_optimization().backward(loss, *args, **kwargs)

    def clip_gradients(
        self,
        optimizer: Any,
        gradient_clip_val: float | int | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Unscale (amp) and clip the gradients of `optimizer`'s parameters.

        Defaults come from the Trainer's `gradient_clip_val`/`gradient_clip_algorithm`. In automatic
        optimization, call it from `configure_gradient_clipping` (Lightning's checks: a value that
        disagrees with the Trainer's raises).
        """
        link = self._link()
        if self.automatic_optimization:
            optimization = link.optimization
            if optimization is None or not hasattr(optimization, "clip_gradients"):
                raise RuntimeError(
                    "clip_gradients in automatic optimization clips before an optimizer step: expected it to be "
                    "called from configure_gradient_clipping (or optimizer_step) during fit."
                )
            optimization.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        link.manual_optimization().clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only `optimizer`'s parameters require grad until `untoggle_optimizer` (GANs)."""
        own = {id(p) for group in optimizer.param_groups for p in group["params"]}
        saved: dict[int, tuple[torch.nn.Parameter, bool]] = {}
        for other in self._link().optimizer_setup().optimizers:
            for group in other.param_groups:
                for p in group["params"]:
                    if id(p) not in own and id(p) not in saved:
                        saved[id(p)] = (p, p.requires_grad)
                        p.requires_grad_(False)
        object.__setattr__(self, "_toggled", saved)

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Restore `requires_grad` as it was before `toggle_optimizer`."""
        for p, flag in self.__dict__.get("_toggled", {}).values():
            p.requires_grad_(flag)
        object.__setattr__(self, "_toggled", {})
