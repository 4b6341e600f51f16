"""`trainer.fit_loop`: the part of Lightning's fit-loop object that projects read and set
(`trainer.fit_loop.max_epochs = 20` before a resumed fit, the epoch and step counters), over
this Trainer's own arguments and counters. Anything else of Lightning's loop internals raises
an AttributeError that names what to read instead."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["FitLoopView"]

_INSTEAD = ("trainer.current_epoch, trainer.global_step, trainer.max_epochs / max_steps, "
            "trainer.num_training_batches, trainer.estimated_stepping_batches, or the hooks' `batch_idx` argument")


class Progress:
    """Lightning's progress counters for one kind of event (`ready`, `started`, `processed`, `completed`)."""

    def __init__(self, ready: int, started: int, processed: int, completed: int) -> None:
        self.ready, self.started, self.processed, self.completed = ready, started, processed, completed

    def __repr__(self) -> str:
        return (f"Progress(ready={self.ready}, started={self.started}, processed={self.processed}, "
                f"completed={self.completed})")


class Tracker:
    """`current` (this fit's) and `total` counters; here both count the run's epochs, resumes included."""

    def __init__(self, progress: Progress) -> None:
        self.current = self.total = progress


class LoopHost(Protocol):
    """What the view reads of the Trainer."""

    args: Any

    @property
    def global_step(self) -> int: ...
    @property
    def current_epoch(self) -> int: ...
    @property
    def training(self) -> bool: ...
    @property
    def max_epochs(self) -> int | None: ...
    @property
    def max_steps(self) -> int | None: ...


class _View:
    def __init__(self, trainer: LoopHost) -> None:
        self._trainer = trainer

    def _set_arg(self, name: str, value: Any) -> None:
        args = self._trainer.args
        args.__pydantic_validator__.validate_assignment(args, name, value)  # the Trainer's own checks

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"trainer.{self._path}.{name} is part of Lightning's loop internals, which this Trainer does not "
            f"have. Read {_INSTEAD} instead.")

    _path = "fit_loop"


class EpochLoopView(_View):
    """`trainer.fit_loop.epoch_loop`: the step counters and `max_steps`."""

    _path = "fit_loop.epoch_loop"

    @property
    def global_step(self) -> int:
        return int(self._trainer.global_step)

    @property
    def _batches_that_stepped(self) -> int:
        """The step the loggers write at (the optimizer step here)."""
        return int(self._trainer.global_step)

    @property
    def max_steps(self) -> int:
        return -1 if self._trainer.max_steps is None else int(self._trainer.max_steps)

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self._set_arg("max_steps", value)

    @property
    def min_steps(self) -> int | None:
        return self._trainer.args.min_steps  # type: ignore[no-any-return]

    @min_steps.setter
    def min_steps(self, value: int | None) -> None:
        self._set_arg("min_steps", value)


class FitLoopView(_View):
    """`trainer.fit_loop`, as far as Lightning projects use it: `max_epochs`/`min_epochs` (settable:
    a later `fit` trains to the new limit), `max_steps`/`min_steps`,
    `epoch_progress` (epochs started and completed), `epoch_loop` and `done`."""

    @property
    def max_epochs(self) -> int:
        """-1 when no epoch limit is set (Lightning's value)."""
        return -1 if self._trainer.max_epochs is None else int(self._trainer.max_epochs)

    @max_epochs.setter
    def max_epochs(self, value: int | None) -> None:
        self._set_arg("max_epochs", value)

    @property
    def min_epochs(self) -> int | None:
        return self._trainer.args.min_epochs  # type: ignore[no-any-return]

    @min_epochs.setter
    def min_epochs(self, value: int | None) -> None:
        self._set_arg("min_epochs", value)

    @property
    def max_steps(self) -> int:
        return self.epoch_loop.max_steps

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self.epoch_loop.max_steps = value

    @property
    def min_steps(self) -> int | None:
        return self.epoch_loop.min_steps

    @min_steps.setter
    def min_steps(self, value: int | None) -> None:
        self.epoch_loop.min_steps = value

    @property
    def epoch_loop(self) -> EpochLoopView:
        return EpochLoopView(self._trainer)

    @property
    def epoch_progress(self) -> Tracker:
        """Epochs completed (`completed`, Lightning's `current_epoch`) and started (one more while
        an epoch runs)."""
        done = int(self._trainer.current_epoch)
        started = done + (1 if self._trainer.training else 0)
        return Tracker(Progress(started, started, done, done))

    @property
    def done(self) -> bool:
        """Whether the limits are reached (a later `fit` would train no further)."""
        loop = getattr(self._trainer, "_loop", None)  # the Trainer's FitLoop, once a fit ran
        return bool(loop is not None and loop.finished())

    def setup_data(self) -> None:
        """Lightning builds its loaders here. While fit starts (before it asked for its loaders,
        as in `on_fit_start`), this asks for them now, as Lightning's does, and
        `trainer.train_dataloader` is set; otherwise nothing is left to do."""
        prepare = getattr(self._trainer, "_fit_loaders", None)  # set while fit sets up, until it asks itself
        if prepare is not None:
            prepare(True)  # asked for after on_fit_start: with a sanity check the first iterator opens after it
