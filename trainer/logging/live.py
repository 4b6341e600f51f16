"""What a run shows between logging steps: the bar's numbers on a wall-clock cadence, and
compact lines instead of the bar when the output is not a terminal.

- `LiveNumbers`: after an optimizer step that writes nothing (not a `log_every_n_steps`
  step), at most every `REFRESH_SECONDS` the window's loss is read to the host and shown, so
  the bar shows the loss from the first step on. One host read per half second costs nothing
  measurable per step on average; steps in between only compare two clock readings.
- `LineProgress`: for a SLURM log file, CI or `nohup`: no carriage returns, one line every
  `every_seconds` seconds or `every_n_steps` steps, one at each epoch's end (with its
  validation metrics) and one when fit ends. A Jupyter kernel keeps the bar (a widget).

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> lines = LineProgress(every_seconds=None, every_n_steps=2, stream=out)
    >>> step = [0]
    >>> lines.status = lambda: {"step": step[0], "total_steps": 10, "epoch": 0}
    >>> lines.start_train_epoch(0, 5)
    >>> step[0] = 2  # two optimizer steps later
    >>> lines.set_postfix({"loss": 0.25})
    >>> out.getvalue().split(" | ")[:3]
    ['epoch 0', 'step 2/10 (20%)', 'loss 0.25']
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import torch

from trainer.logging.metrics import batch_size_of, to_floats

__all__ = ["REFRESH_SECONDS", "LiveNumbers", "LineProgress", "fresh_values", "line_settings", "ordered", "run_progress",
           "wants_lines"]

#: How often the bar's numbers are refreshed between logging steps (seconds).
REFRESH_SECONDS = 0.5


def wants_lines(setting: Any, stream: Any = None) -> bool:
    """`progress_lines`: True/a dict: lines; False: the bar; None: lines unless the bar's
    stream (stderr) is a terminal or this is a Jupyter kernel (its widget or text bar)."""
    if setting is not None:
        return setting is not False
    if _in_jupyter():
        return False
    isatty = getattr(stream if stream is not None else sys.stderr, "isatty", None)
    try:
        return not (callable(isatty) and isatty())
    except ValueError:  # a closed stream
        return True


def line_settings(setting: Any) -> dict[str, Any]:
    """`progress_lines={"every_n_steps": n, "every_seconds": t}`: LineProgress's arguments."""
    return dict(setting) if isinstance(setting, Mapping) else {}


def ordered(values: Mapping[str, float]) -> dict[str, float]:
    """The bar's and the lines' fields in one fixed order, whatever order they arrived in:
    `loss` first, then the others by name."""
    return {name: values[name] for name in sorted(values, key=lambda name: (name != "loss", name))}


def run_progress(args: Any, state: Any, global_step: int, per_epoch: float, module: Any,
                 estimated_steps: Callable[[], Any]) -> dict[str, Any]:
    """`fraction`: how much of the fit is done, by whichever limit ends it first (the training
    batches of `max_epochs`, or `max_steps`); `total_steps`: the fit's optimizer steps when
    known exactly. Under manual optimization a batch may take any number of steps (a GAN
    takes two), so the total is known only from `max_steps` alone."""
    epochs = args.max_epochs if args.max_epochs is not None else (None if args.max_steps else max(1, args.min_epochs or 0))
    by_epochs = epochs is not None and not math.isinf(per_epoch) and per_epoch > 0
    fractions = [(state.epoch * per_epoch + state.batches_done) / (epochs * per_epoch)] if by_epochs and epochs else []
    if args.max_steps:
        fractions.append(global_step / args.max_steps)
    if module is None or module.automatic_optimization:
        total = estimated_steps()
    else:
        total = args.max_steps if args.max_steps and not by_epochs else None
    return {"fraction": min(max(fractions), 1.0) if fractions else None, "total_steps": total}


def fresh_values(metrics: Any, last_loss: torch.Tensor | None) -> dict[str, float]:
    """What the bar shows, read now: the last step's loss and the newest value of every
    `prog_bar=True` metric, as `trainer.progress_bar_metrics` reads them (one host read; at
    most every `REFRESH_SECONDS`, or once per line)."""
    current, shown = metrics.bar_values(), metrics.prog_bar
    live: dict[str, Any] = {name: current[name] for name in shown
                            if name in current and f"{name}_step" not in shown and f"{name}_epoch" not in shown}
    if last_loss is not None:
        live["loss"] = last_loss
    return to_floats(live)


def _in_jupyter() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class LiveNumbers:
    """Between logging steps: the loss on the bar, read at most every `interval` seconds
    (or when the lines are due to print one)."""

    def __init__(self, interval: float = REFRESH_SECONDS, clock: Callable[[], float] = time.perf_counter) -> None:
        self.interval, self.clock = interval, clock
        self._next: float | None = None  # None: the next step refreshes (the first one shows the loss)

    def reset(self) -> None:
        self._next = None

    def step(self, progress: Any, shown: dict[str, float], window_loss: torch.Tensor | None, step: int,
             fresh: Callable[[], Mapping[str, float]] | None = None) -> None:
        """After an optimizer step that logged nothing; `fresh()` reads the bar's values now
        (the loss and the `prog_bar=True` metrics), else only `window_loss` is read."""
        if window_loss is None and fresh is None:
            return
        now = self.clock()
        due = progress.due(now, step) if isinstance(progress, LineProgress) else self._next is None or now >= self._next
        if not due:
            return
        self._next = now + self.interval
        if fresh is not None:
            shown.update(fresh())  # the one host read of this interval
        elif window_loss is not None:
            shown["loss"] = float(window_loss.detach().float())
        progress.set_postfix(ordered(shown))


class LineProgress:
    """The progress bar's interface, written as whole lines (no `\\r`, no cursor movement).

    Args:
        every_seconds: a line at least this often while training (None: not by time).
        every_n_steps: a line every n optimizer steps (None: not by count).
        stream: where lines go (None: `sys.stderr`, where the bar would draw).
    """

    def __init__(self, every_seconds: float | None = 30.0, every_n_steps: int | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.every_seconds, self.every_n_steps = every_seconds, every_n_steps
        self.stream, self.clock = stream, clock
        self.status: Callable[[], dict[str, Any]] = lambda: {}  # step, total_steps, fraction, epoch, epoch metrics
        self.fresh: Callable[[], Mapping[str, float]] = lambda: {}  # the bar's values now (read for an epoch's line)
        self.values: dict[str, float] = {}
        self._epoch: int | None = None
        self._start = self._line_time = self._epoch_time = clock()
        self._first_step: int | None = None
        self._first_fraction: float | None = None
        self._line_step = self._epoch_start_step = 0
        self._samples = self._samples_at_line = 0
        self._samples_known = True
        self._printed_step: int | None = None

    # ------------------------------------------------------------- the bar's interface
    def start_train_epoch(self, epoch: int, total: int | None) -> None:
        if self._epoch is not None:
            self._epoch_line()
        status = self.status()
        step = int(status.get("step", 0))
        if self._first_step is None:
            self._first_step, self._line_step = step, step
            self._first_fraction = _fraction(status, step)
        self._epoch, self._epoch_time, self._epoch_start_step = epoch, self.clock(), step

    def advance(self, n: int = 1) -> None:
        """Per micro-batch: nothing to draw."""

    def count_samples(self, batch: Any) -> None:
        """Per micro-batch: its samples (tensor metadata only), for samples/s."""
        if self._samples_known:
            size = batch_size_of(batch)
            if size is None:
                self._samples_known = False
            else:
                self._samples += size

    def set_postfix(self, values: Mapping[str, float]) -> None:
        self.values.update(values)
        step = int(self.status().get("step", 0))
        if self._epoch is not None and self.due(self.clock(), step):
            self._line(step)

    def start_validation(self, total: int | None, desc: str = "Validation") -> None: ...
    def advance_validation(self) -> None: ...
    def end_validation(self) -> None: ...

    def close(self) -> None:
        if self._epoch is not None:
            self._epoch_line()
        self._epoch = None

    # ------------------------------------------------------------------------- lines
    def due(self, now: float, step: int) -> bool:
        """Whether a line is due after optimizer step `step`."""
        if step == self._printed_step:
            return False
        by_time = self.every_seconds is not None and now - self._line_time >= self.every_seconds
        by_count = self.every_n_steps is not None and step - self._line_step >= self.every_n_steps
        return by_time or by_count

    def _line(self, step: int, prefix: str = "", extra: Mapping[str, float] | None = None) -> None:
        now = self.clock()
        status = self.status()
        total, fraction = _total(status), _fraction(status, step)
        parts = [f"{prefix}epoch {self._epoch}"]
        percent = f" ({100 * fraction:.0f}%)" if fraction is not None else ""
        parts.append(f"step {step}/{total}{percent}" if total is not None else f"step {step}{percent}")
        shown = ordered({**self.values, **(extra or {})})
        parts += [f"{name} {value:.4g}" for name, value in shown.items()]
        elapsed = now - self._line_time
        if self._samples_known and self._samples > self._samples_at_line and elapsed > 0:
            parts.append(f"{(self._samples - self._samples_at_line) / elapsed:,.0f} samples/s")
        parts.append(f"elapsed {_clock(now - self._start)}")
        first = self._first_fraction or 0.0
        if fraction is not None and first < fraction < 1:
            parts.append(f"ETA {_clock((1 - fraction) * (now - self._start) / (fraction - first))}")
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(" | ".join(parts) + "\n")
        stream.flush()
        self._line_time, self._line_step, self._samples_at_line = now, step, self._samples
        self._printed_step = step

    def _epoch_line(self) -> None:
        """When the next epoch starts or fit ends: the epoch's last line, with its validation."""
        status = self.status()
        step = int(status.get("step", 0))
        if step == self._epoch_start_step and not self.values:
            return  # nothing ran in this epoch (a resume at its end, an empty fit)
        self.values.update(self.fresh())  # the last steps' values, also when no line was due since the epoch began
        metrics = {k: v for k, v in dict(status.get("epoch_metrics") or {}).items() if k not in self.values}
        ended = int(status.get("epoch", -1)) > (self._epoch or 0)  # else stopped inside it
        self._printed_step = None
        self._line(step, prefix="end of " if ended else "", extra=metrics)


def _total(status: Mapping[str, Any]) -> int | None:
    """The run's optimizer steps when they are known exactly (None: not known)."""
    total = status.get("total_steps")
    if isinstance(total, (int, float)) and not math.isinf(total) and total > 0:
        return int(total)
    return None


def _fraction(status: Mapping[str, Any], step: int) -> float | None:
    """How much of the run is done: `fraction` when the Trainer says, else `step` of the total."""
    fraction = status.get("fraction")
    if isinstance(fraction, (int, float)):
        return min(max(float(fraction), 0.0), 1.0)
    total = _total(status)
    return min(step / total, 1.0) if total is not None else None


def _clock(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
