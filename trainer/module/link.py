"""The link between a `Module` and the Trainer it is attached to, both held weakly: the Trainer
(`self.trainer`) and the Trainer's run (`TrainerLink`), with Lightning's read-only views of the
Trainer (`global_step`, `current_epoch`, `logger`, `loggers`), which outside a Trainer read as
Lightning's do.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from trainer.module.tools import ModuleTools

__all__ = ["ModuleLink", "TrainerLink"]


class TrainerLink(Protocol):
    """What a module reaches in the Trainer's run (`trainer/loops/context.py`)."""

    @property
    def optimization(self) -> Any: ...
    def progress_bar(self) -> Any: ...
    def optimizer_setup(self) -> Any: ...
    def manual_optimization(self) -> Any: ...
    def log_metric(
        self,
        name: str,
        value: torch.Tensor | float | int | Any,
        *,
        on_step: bool | None,
        on_epoch: bool | None,
        prog_bar: bool,
        reduce: str,
        batch_size: int | None,
        logger: bool = True,
        add_dataloader_idx: bool = True,
    ) -> None: ...


class ModuleLink(ModuleTools):
    """`Module`'s link to its Trainer (set by `fit`/`validate`/...; a pickled or copied module leaves it behind)."""

    @property
    def trainer(self) -> Any:
        """The Trainer this module is attached to (set by `fit`/`validate`/...)."""
        ref = self._attached()
        if ref is None and not self.__dict__.get("_jit_is_scripting"):  # TorchScript reads every attribute
            raise RuntimeError(
                f"{type(self).__name__} is not attached to a Trainer (or the Trainer it was attached to no "
                "longer exists). Expected it to be passed to Trainer.fit/validate/test/predict first."
            )
        return ref

    @trainer.setter
    def trainer(self, trainer: object) -> None:
        """Lightning's setter, for a module that builds its own Trainer (`self.trainer =
        Trainer(...)` in `__init__`, then `self.trainer.fit(self)`): the module keeps that Trainer
        alive (it is its only owner) and reads it as `self.trainer` until `fit`/`validate`/... attach
        it; None detaches. Child modules follow, as in Lightning."""
        for child in self.children():
            if isinstance(child, ModuleLink):
                child.trainer = trainer
        object.__setattr__(self, "_owned_trainer", trainer)
        object.__setattr__(self, "_trainer_ref", None if trainer is None else weakref.ref(trainer))
        object.__setattr__(self, "_run_ref", None)  # a run links itself when the Trainer attaches the module

    def _attach(self, trainer: object, run: TrainerLink) -> None:
        # Weak: the Trainer holds the module, so a strong link back would be a reference cycle,
        # and a finished run's module (its GPU memory) would wait for the garbage collector.
        # Modules nested in it are attached too (`self.inner.trainer`, `.current_epoch`), as
        # Lightning's trainer setter does for the LightningModules among its children.
        trainer_ref, run_ref = weakref.ref(trainer), weakref.ref(run)
        for module in self.modules():
            if isinstance(module, ModuleLink):
                object.__setattr__(module, "_trainer_ref", trainer_ref)
                object.__setattr__(module, "_run_ref", run_ref)

    def _running(self) -> TrainerLink | None:
        """The run of the Trainer this module is attached to, or None (never attached, or gone)."""
        ref = self.__dict__.get("_run_ref")
        return ref() if ref is not None else None  # type: ignore[no-any-return]

    def _link(self) -> TrainerLink:
        """What `self.optimizers()`, `self.manual_backward` and `clip_gradients` reach in the Trainer."""
        run = self._running()
        if run is None:
            self.trainer  # not attached: raises the error that says so  # noqa: B018
        assert run is not None, "the run lives as long as its Trainer"
        return run

    def _attached(self) -> Any:
        """The Trainer this module is attached to, or None (never attached, or gone)."""
        ref = self.__dict__.get("_trainer_ref")
        return ref() if ref is not None else None

    @property
    def _trainer(self) -> Any:
        """Lightning's spelling of the same, which projects test (`if self._trainer is not None:`)."""
        return self._attached()

    # Lightning's read-only views of the Trainer; outside a Trainer they read as Lightning's do.
    @property
    def global_step(self) -> int:
        """Optimizer steps taken by the Trainer (0 outside one)."""
        ref = self._attached()
        return int(ref.global_step) if ref is not None else 0

    @property
    def current_epoch(self) -> int:
        """The Trainer's epoch (0 outside one)."""
        ref = self._attached()
        return int(ref.current_epoch) if ref is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's (first) logger, None outside a Trainer or without one. For the default
        TensorBoard logger, `self.logger.experiment` is its `SummaryWriter`."""
        ref = self._attached()
        return ref.logger if ref is not None else None

    @property
    def loggers(self) -> list[Any]:
        """Every logger of the Trainer (`[]` outside one or without one)."""
        ref = self._attached()
        return list(ref.loggers) if ref is not None else []
