"""Lightning's profilers at Lightning's path (`from trainer.profilers import SimpleProfiler,
PyTorchProfiler`), mapped onto what `Trainer(profiler=...)` does here:

- `SimpleProfiler(dirpath=None, filename=None)`: `profiler="simple"`, the time spent in every
  hook, training batch and evaluation step; this object is the one the Trainer fills
  (`trainer.profiler.summary()`); with a `filename` the report goes to
  `<dirpath or the run's folder>/fit-<filename>.txt` when fit ends, else it is logged at INFO;
- `PyTorchProfiler(dirpath=None, filename=None, row_limit=20, group_by_input_shapes=False,
  schedule=torch.profiler.schedule(...), record_shapes=, profile_memory=, with_stack=)`:
  `profiler="pytorch"` with those settings, torch.profiler traces of a window of optimizer
  steps (wait 1, warm up 1, record 3 by default, as Lightning's schedule) written to
  `dirpath` (default `<run folder>/profiler/`) with the table in `<filename>.txt`;
- `PassThroughProfiler()`: no profiler;
- `AdvancedProfiler` (cProfile per action) and a `Profiler` subclass of your own are not
  called by this Trainer: constructing the first, or passing the second, raises an error
  saying what to use instead.

Example:
    >>> from trainer import Trainer
    >>> from trainer.profilers import PyTorchProfiler, SimpleProfiler
    >>> timer = SimpleProfiler()
    >>> Trainer(profiler=timer, logger=False).profiler is timer
    True
    >>> Trainer(profiler=PyTorchProfiler(row_limit=10), logger=False).args.profiler
    {'row_limit': 10}
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.logging.profiler import SimpleProfiler

__all__ = ["Profiler", "PassThroughProfiler", "SimpleProfiler", "AdvancedProfiler", "PyTorchProfiler"]

_WHAT_INSTEAD = (
    "Expected SimpleProfiler() or profiler='simple' (the time spent in every hook and step), PyTorchProfiler(...) or "
    "profiler='pytorch' (torch.profiler traces of a few optimizer steps), or None."
)


class Profiler(abc.ABC):
    """Lightning's base class of a profiler. A subclass of your own can time code itself
    (`with profiler.profile("name"): ...`), but the Trainer does not call it: passing one as
    `Trainer(profiler=...)` raises an error saying what the Trainer takes."""

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None) -> None:
        self.dirpath, self.filename = dirpath, filename

    @abc.abstractmethod
    def start(self, action_name: str) -> None:
        """Start timing `action_name`."""

    @abc.abstractmethod
    def stop(self, action_name: str) -> None:
        """Stop timing `action_name`."""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[str]:
        self.start(action_name)
        try:
            yield action_name
        finally:
            self.stop(action_name)

    def summary(self) -> str:
        return ""

    def describe(self) -> None:
        """Nothing to report by default."""

    def trainer_setting(self) -> Any:
        raise ValueError(
            f"Trainer(profiler={type(self).__name__}(...)): a Profiler subclass of your own is not called by this "
            f"Trainer (it does not call start/stop around its hooks). {_WHAT_INSTEAD}"
        )


class PassThroughProfiler(Profiler):
    """No profiling: `Trainer(profiler=PassThroughProfiler())` is `profiler=None`."""

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass

    def trainer_setting(self) -> None:
        return None


class AdvancedProfiler(Profiler):
    """Lightning's cProfile report per action: not offered here (see the module)."""

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None, line_count_restriction: float = 1.0,
                 dump_stats: bool = False) -> None:
        raise ValueError(
            "AdvancedProfiler is Lightning's cProfile report per action, which this Trainer does not offer. "
            f"{_WHAT_INSTEAD} For a cProfile of your own, run the script under `python -m cProfile -o out.prof script.py`."
        )

    def start(self, action_name: str) -> None:  # pragma: no cover - never constructed
        pass

    def stop(self, action_name: str) -> None:  # pragma: no cover - never constructed
        pass


#: torch.profiler's own arguments that PyTorchProfiler maps onto the Trainer's profiler settings
_TORCH_ARGUMENTS = {"record_shapes": "record_shapes", "profile_memory": "record_memory", "with_stack": "with_stack"}


class PyTorchProfiler(Profiler):
    """Lightning's `PyTorchProfiler`, as the Trainer's torch.profiler settings (see the module).

    Raises:
        ValueError: an argument with no meaning here (`emit_nvtx=True`, `export_to_chrome=False`,
            `sort_by_key`, `table_kwargs`, torch.profiler's `activities`, `on_trace_ready`, ...),
            saying what is taken.
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        emit_nvtx: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = True,
        table_kwargs: dict[str, Any] | None = None,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath, filename)
        refused = [name for name, value, default in (("emit_nvtx", emit_nvtx, False), ("export_to_chrome", export_to_chrome, True),
                                                     ("sort_by_key", sort_by_key, None), ("table_kwargs", table_kwargs, None))
                   if value != default]
        refused += sorted(set(profiler_kwargs) - set(_TORCH_ARGUMENTS) - {"schedule"})
        if refused:
            raise ValueError(
                f"PyTorchProfiler({', '.join(f'{name}=...' for name in refused)}) has no meaning here: the Trainer writes "
                "Chrome traces of a window of optimizer steps and a table sorted by self time. Expected only dirpath, "
                "filename, row_limit, group_by_input_shapes, record_module_names, schedule=torch.profiler.schedule(...), "
                "record_shapes, profile_memory and with_stack."
            )
        settings: dict[str, Any] = {"row_limit": row_limit} if row_limit != 20 else {}
        settings.update({ours: bool(profiler_kwargs[theirs]) for theirs, ours in _TORCH_ARGUMENTS.items() if theirs in profiler_kwargs})
        if group_by_input_shapes:
            settings["record_shapes"] = True
        if profiler_kwargs.get("schedule") is not None:
            settings.update(_schedule_settings(profiler_kwargs["schedule"]))
        settings.update({k: v for k, v in (("dirpath", dirpath), ("filename", filename)) if v is not None})
        self.settings = settings

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass

    def trainer_setting(self) -> dict[str, Any]:
        return dict(self.settings) if self.settings else {}


def _schedule_settings(schedule: Any) -> dict[str, int]:
    """wait/warmup/active/repeat/skip_first of a `torch.profiler.schedule(...)`, read from the function it made.

    Raises:
        ValueError: `schedule` is not one `torch.profiler.schedule` made.
    """
    code, cells = getattr(schedule, "__code__", None), getattr(schedule, "__closure__", None) or ()
    values = dict(zip(code.co_freevars, (cell.cell_contents for cell in cells))) if code is not None else {}
    if not {"wait", "warmup", "active"} <= set(values):
        raise ValueError(
            f"PyTorchProfiler(schedule=...) expected torch.profiler.schedule(wait=..., warmup=..., active=..., repeat=...). "
            f"Received: {schedule!r}."
        )
    settings = {key: int(values[key]) for key in ("wait", "warmup", "active", "repeat") if key in values}
    if values.get("skip_first"):
        settings["skip_first"] = int(values["skip_first"])
    return settings
