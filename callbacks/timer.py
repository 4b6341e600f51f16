"""`Timer`: measures the time of each stage and stops training at a time limit (Lightning's)."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from trainer import Callback
from trainer.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from trainer import Trainer

__all__ = ["Timer"]

#: Lightning's stage names (`RunningStage` values), the keys of `time_elapsed(stage)`.
STAGES = ("train", "sanity_check", "validate", "test", "predict")
_ALIASES = {"training": "train", "validating": "validate", "validation": "validate", "testing": "test",
            "predicting": "predict", "sanity_checking": "sanity_check"}


def parse_duration(duration: str | timedelta | dict[str, int] | None) -> float | None:
    """Seconds of a `Timer` duration: "DD:HH:MM:SS", a `timedelta`, a dict of `timedelta`
    keywords, or None (no limit).

    Example:
        >>> parse_duration("00:12:00:00"), parse_duration({"minutes": 1})
        (43200.0, 60.0)
    """
    if duration is None:
        return None
    if isinstance(duration, str):
        match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", duration.strip())
        if not match:
            raise ValueError(f"Timer(duration={duration!r}) is not a valid duration. "
                             "Expected a string in the format DD:HH:MM:SS (days, hours, minutes, seconds).")
        days, hours, minutes, seconds = (int(part) for part in match.groups())
        duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(duration, dict):
        try:
            duration = timedelta(**duration)
        except TypeError as error:
            raise ValueError(f"Timer(duration={duration!r}): {error}. Expected timedelta's keywords "
                             "(weeks, days, hours, minutes, seconds, ...).") from None
    if not isinstance(duration, timedelta):
        raise ValueError(f"Timer(duration=...) expected a 'DD:HH:MM:SS' string, a timedelta or a dict of "
                         f"timedelta keywords. Received: {duration!r}.")
    return duration.total_seconds()


def _stage(stage: str) -> str:
    name = _ALIASES.get(str(stage).lower(), str(stage).lower())
    if name not in STAGES:
        raise ValueError(f"Timer: unknown stage {stage!r}. Expected one of {', '.join(STAGES)}.")
    return name


class Timer(Callback):
    """Times training, validation, test and predict, and stops training once `duration` has
    passed (`trainer.should_stop = True`), checked after every training batch
    (`interval="step"`) or at every epoch's end (`interval="epoch"`), and when fit starts.
    The time trained so far is part of the checkpoint: a resumed run counts it against
    `duration` (Lightning's rule).

    Args:
        duration: "DD:HH:MM:SS", a `datetime.timedelta`, or a dict of timedelta keywords
            (`{"hours": 2}`); None measures without a limit.
        interval: "step" or "epoch".
        verbose: log (INFO, rank 0) when the limit is reached.

    Example:
        >>> from callbacks import Timer
        >>> timer = Timer(duration="00:12:00:00")
        >>> timer.time_remaining("train")
        43200.0
    """

    def __init__(self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step",
                 verbose: bool = True) -> None:
        if interval not in ("step", "epoch"):
            raise ValueError(f"Timer(interval={interval!r}) is not supported. Expected 'step' or 'epoch'.")
        self._duration = parse_duration(duration)
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(STAGES)
        self._offset = 0.0  # training time of the run this one resumes

    def start_time(self, stage: str = "train") -> float | None:
        """When `stage` last started (`time.monotonic()` seconds), or None."""
        return self._start_time[_stage(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """When `stage` last ended (`time.monotonic()` seconds), or None."""
        return self._end_time[_stage(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds `stage` has run (so far, while it runs); for "train" plus the resumed run's."""
        name = _stage(stage)
        start, end = self._start_time[name], self._end_time[name]
        offset = self._offset if name == "train" else 0.0
        if start is None:
            return offset
        if end is None:
            return time.monotonic() - start + offset
        return end - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of `duration` (negative once past it), or None without a duration."""
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    def _mark(self, which: dict[str, float | None], stage: str) -> None:
        which[stage] = time.monotonic()

    def on_train_start(self, trainer: Trainer, module: Any) -> None:
        self._mark(self._start_time, "train")

    def on_train_end(self, trainer: Trainer, module: Any) -> None:
        self._mark(self._end_time, "train")

    def on_validation_start(self, trainer: Trainer, module: Any) -> None:
        self._mark(self._start_time, "validate")  # the sanity check too (Lightning)

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        self._mark(self._end_time, "validate")

    def on_test_start(self, trainer: Trainer, module: Any) -> None:
        self._mark(self._start_time, "test")

    def on_test_end(self, trainer: Trainer, module: Any) -> None:
        self._mark(self._end_time, "test")

    def on_fit_start(self, trainer: Trainer, module: Any) -> None:
        if self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in STAGES}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._offset = float(state.get("time_elapsed", {}).get("train", 0.0))

    def _check_time_remaining(self, trainer: Trainer) -> None:
        # Under DDP a rank's request is agreed by all ranks at the Trainer's next agreement point.
        assert self._duration is not None
        if self.time_elapsed() >= self._duration:
            trainer.should_stop = True
            if self._verbose:
                elapsed = timedelta(seconds=int(self.time_elapsed("train")))
                rank_zero_info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")
