"""What the Trainer is doing, in Lightning's words: `trainer.state.fn` (the call that runs:
`"fit"`, `"validate"`, `"test"`, `"predict"`), `trainer.state.stage` (the part of it that runs:
`"train"`, `"sanity_check"`, `"validate"`, `"test"`, `"predict"`, None between calls) and
`trainer.state.status` (`"initializing"`, `"running"`, `"finished"`, `"interrupted"`).

The enums are Lightning's (`from lightning.pytorch.trainer.states import RunningStage` reads
`from trainer.trainer.states import RunningStage` here): members are strings that compare equal
to their value in any case (`RunningStage.TRAINING == "train"`), and `str()`/f-strings give
what Python gives for a `str` enum, as Lightning's do (`f"{trainer.state.stage}_loss"` is
`"RunningStage.TRAINING_loss"` on Python 3.11 and later; `.value` is `"train"`).

`trainer.state` also reads and writes the loop's own counters (`trainer.state.skipped_steps`,
`.elapsed`, `.batches_done`, ...: `trainer/loops/state.py`).

Example:
    >>> RunningStage.VALIDATING == "VALIDATE", RunningStage.SANITY_CHECKING.value, RunningStage("train")
    (True, 'sanity_check', <RunningStage.TRAINING: 'train'>)
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable

__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]


class _Choice(str, Enum):
    """A string-valued enum compared and hashed by its value, case-insensitively (Lightning's
    `LightningEnum`; `str()` and `format()` are Python's for a `str` enum, as there)."""

    def __eq__(self, other: object) -> bool:
        text = other.value if isinstance(other, Enum) else str(other)
        return bool(self.value.lower() == str(text).lower())

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.value.lower())


class TrainerStatus(_Choice):
    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(_Choice):
    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(_Choice):
    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str:
        return "val" if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING) else str(self.value)


class TrainerState:
    """`trainer.state`: Lightning's `status`, `fn` and `stage`, read from the Trainer when asked,
    and the loop's counters (any other attribute reads and writes the run's `LoopState`,
    `loop`; typed Any here: `trainer.loops` imports this module's users)."""

    __slots__ = ("_loop", "_fn", "_stage", "_status")

    def __init__(self, loop: Any, fn: Callable[[], TrainerFn | None], stage: Callable[[], RunningStage | None],
                 status: Callable[[], TrainerStatus]) -> None:
        object.__setattr__(self, "_loop", loop)
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_stage", stage)
        object.__setattr__(self, "_status", status)

    @property
    def loop(self) -> Any:
        """The run's `LoopState` this view reads."""
        return self._loop

    @property
    def fn(self) -> TrainerFn | None:
        return self._fn()

    @property
    def stage(self) -> RunningStage | None:
        return self._stage()

    @property
    def status(self) -> TrainerStatus:
        return self._status()

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("fn", "stage", "status"):
            raise AttributeError(f"trainer.state.{name} is set by the Trainer as it runs; it can't be assigned. "
                                 f"Read it (trainer.state.{name}) or call fit/validate/test/predict.")
        setattr(self._loop, name, value)

    def __repr__(self) -> str:
        return f"TrainerState(status={self.status!r}, fn={self.fn!r}, stage={self.stage!r}, loop={self._loop!r})"
