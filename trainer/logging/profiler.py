"""`Trainer(profiler=...)`: a `torch.profiler` session over a window of optimizer steps.

    Trainer(profiler=True)                                   # wait 1, warm up 1, record 3 steps
    Trainer(profiler={"wait": 5, "warmup": 2, "active": 4, "record_memory": True})

Traces are written to `<run folder>/profiler/` in the Chrome-trace JSON format that
TensorBoard's profiler plugin (`tensorboard --logdir runs`) and Perfetto (ui.perfetto.dev)
open; `summary.txt` beside them lists the operators that took the most time, and the same
table is logged at INFO when fit ends. With `profiler=None` (the default) nothing is
created and the loop makes no call at all.

Example:
    >>> from trainer.logging.profiler import StepProfiler
    >>> StepProfiler.from_arg(True).schedule_args
    {'wait': 1, 'warmup': 1, 'active': 3, 'repeat': 1}
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from trainer._utils import PROFILER_KEYS, profiler_settings

__all__ = ["StepProfiler", "SimpleProfiler", "PROFILER_KEYS"]

log = logging.getLogger("trainer")



class StepProfiler:
    """Profiles optimizer steps `wait + warmup .. wait + warmup + active` (per `repeat`)."""

    def __init__(
        self,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        record_memory: bool = False,
        record_shapes: bool = False,
        with_stack: bool = False,
        row_limit: int = 15,
        skip_first: int = 0,
        dirpath: str | Path | None = None,
        filename: str | None = None,
    ) -> None:
        self.schedule_args = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        if skip_first:
            self.schedule_args["skip_first"] = skip_first
        self.dirpath, self.summary_name = dirpath, f"{filename}.txt" if filename else "summary.txt"
        self.record_memory, self.record_shapes, self.with_stack = record_memory, record_shapes, with_stack
        self.row_limit = row_limit
        self._profile: Any = None
        self.folder: Path | None = None

    @classmethod
    def from_arg(cls, value: Any) -> StepProfiler | None:
        """None/False/"simple": no torch profiler; True/"pytorch": the defaults; a dict: those settings."""
        settings = profiler_settings(value)
        return None if settings is None else cls(**settings)

    def start(self, folder: Path) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        self.folder = folder = Path(self.dirpath) if self.dirpath is not None else folder
        folder.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self._profile = profile(
            activities=activities,
            schedule=schedule(**self.schedule_args),
            on_trace_ready=tensorboard_trace_handler(str(folder)),
            profile_memory=self.record_memory,
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
        )
        self._profile.__enter__()

    def step(self) -> None:
        """Called after every optimizer step."""
        if self._profile is not None:
            self._profile.step()

    def stop(self) -> None:
        profile, self._profile = self._profile, None
        if profile is None:
            return
        profile.__exit__(None, None, None)
        try:
            sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
            table = profile.key_averages().table(sort_by=sort, row_limit=self.row_limit)
        except (AssertionError, RuntimeError):  # nothing was recorded (fewer steps than the schedule)
            log.warning("Profiler: no step was recorded; fit ended before wait + warmup = %d steps.",
                        self.schedule_args["wait"] + self.schedule_args["warmup"])
            return
        assert self.folder is not None
        (self.folder / self.summary_name).write_text(table, encoding="utf-8")
        log.info("Profiler: traces and %s in %s\n%s", self.summary_name, self.folder, table)


class SimpleProfiler:
    """`Trainer(profiler="simple")`: how long every hook, training batch and evaluation step
    took, as Lightning's SimpleProfiler reports it (`summary()`; logged at INFO when fit ends).

    The Trainer wraps the callables it times once, when a run starts, so nothing is added to
    a run without it.

    Example:
        >>> timer = SimpleProfiler()
        >>> timed = timer.wrap(lambda: 1, "[Module]Net.on_fit_start")
        >>> timed(), timer.calls("[Module]Net.on_fit_start")
        (1, 1)
    """

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None, extended: bool = True) -> None:
        self.durations: dict[str, list[float]] = {}
        self.dirpath, self.filename, self.extended = dirpath, filename, extended

    def trainer_setting(self) -> str:
        """What `Trainer(profiler=SimpleProfiler(...))` stands for (the Trainer then uses this object)."""
        return "simple"

    def report(self, run_dir: Any) -> None:
        """When fit ends: with a `filename`, the summary goes to `<dirpath>/fit-<filename>.txt` (`dirpath`
        defaults to the run's folder, `run_dir()`), as Lightning writes it; else it is logged at INFO."""
        if self.filename is None:
            log.info("%s", self.summary())
            return
        folder = Path(self.dirpath) if self.dirpath is not None else Path(run_dir())
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"fit-{self.filename}.txt").write_text(self.summary() + "\n", encoding="utf-8")

    def wrap(self, fn: Any, action: str) -> Any:
        import functools
        import time

        record = self.durations.setdefault(action, [])

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                record.append(time.perf_counter() - start)

        return timed

    def calls(self, action: str) -> int:
        return len(self.durations.get(action, []))

    def summary(self) -> str:
        """The report: one row per action, the slowest total first."""
        rows = [(name, sum(d) / len(d), len(d), sum(d)) for name, d in self.durations.items() if d]
        rows.sort(key=lambda row: -row[3])
        overall = sum(row[3] for row in rows) or 1.0
        width = max([len("Action")] + [len(row[0]) for row in rows])
        header = f"{'Action':<{width}} | Mean duration (s) | Num calls | Total time (s) | Percentage %"
        lines = ["Profiler Report", header, "-" * len(header)]
        for name, mean, count, total in rows:
            lines.append(f"{name:<{width}} | {mean:<17.6g} | {count:<9d} | {total:<14.6g} | {100 * total / overall:.1f}")
        return "\n".join(lines)
