"""The progress bar the Trainer shows by default (`tqdm.auto`: a widget in Jupyter).

One bar per training epoch (kept on screen when the epoch ends) and a transient bar for
validation, drawn one line below it (`position=1`, `leave=False`) so it never writes over
the training bar. Text bars in a Jupyter cell (no ipywidgets) cannot move the cursor up, so
there the validation bar draws over the training bar's line and clears itself. A loader
without `len` gets a bar without a total (count and rate only).

The postfix (loss and every metric logged with `prog_bar=True`) is refreshed only at
logging intervals, from values the Trainer has already read to the host, so the bar adds
no host synchronisation: per batch it costs one `tqdm.update`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ProgressBar", "RichBar"]


def _shown(value: float) -> str:
    """A value as Lightning's tqdm bar prints it: three significant digits (the plain text when
    that is shorter), then, without an exponent, zeros after the point up to five characters
    (`1.000`, `0.123`, `0.812`, `1e-5`)."""
    plain = str(value)
    short = f"{value:.3g}".replace("e+0", "e+").replace("e-0", "e-")
    text = short if len(short) < len(plain) else plain
    if "e" in text or not isinstance(value, float):
        return text
    if "." not in text and len(text) < 5:
        text += "."
    return text + "0" * (5 - len(text))


class ProgressBar:
    """Draws the training and validation bars; `close` is safe to call at any time.

    `refresh_rate=n` (Lightning's TQDMProgressBar) redraws every n batches; `leave=False` clears
    each epoch's bar when the next starts (Lightning's default; ours keeps them).
    """

    def __init__(self, refresh_rate: int = 1, leave: bool = True) -> None:
        self.leave = leave
        self._bar: Any = None
        self._val_bar: Any = None
        self.refresh_rate = refresh_rate
        self._pending = self._val_pending = 0

    def start_train_epoch(self, epoch: int, total: int | None) -> None:
        tqdm = _auto_tqdm()
        self.close()
        self._pending = 0
        self._bar = tqdm(total=total, desc=f"Epoch {epoch}", unit="batch", dynamic_ncols=True, leave=self.leave, position=0)

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._pending += n
            if self._pending >= self.refresh_rate:
                self._bar.update(self._pending)
                self._pending = 0

    def set_postfix(self, values: Mapping[str, float]) -> None:
        """Show `values` after the bar (drawn with the next update, not immediately)."""
        if self._bar is not None and values:
            self._bar.set_postfix({k: _shown(v) for k, v in values.items()}, refresh=False)

    def start_validation(self, total: int | None, desc: str = "Validation") -> None:
        tqdm = _auto_tqdm()
        self.end_validation()
        below = self._bar is not None
        # Text bars in a Jupyter cell can't move the cursor up: draw over the training line instead.
        nested = below and not _text_in_jupyter(tqdm)
        if below:
            if self._pending:
                self._bar.update(self._pending)
                self._pending = 0
            self._bar.refresh()  # show the finished count and postfix before drawing below it
        self._val_bar = tqdm(
            total=total, desc=desc, unit="batch", dynamic_ncols=True, leave=not below, position=1 if nested else 0
        )

    def advance_validation(self) -> None:
        if self._val_bar is not None:
            self._val_pending += 1
            if self._val_pending >= self.refresh_rate:
                self._val_bar.update(self._val_pending)
                self._val_pending = 0

    def end_validation(self) -> None:
        if self._val_bar is not None:
            if self._val_pending:
                self._val_bar.update(self._val_pending)
            self._val_bar.close()
            self._val_bar = None
        self._val_pending = 0

    def close(self) -> None:
        self.end_validation()
        if self._bar is not None:
            if self._pending:
                self._bar.update(self._pending)
            self._bar.close()
            self._bar = None
        self._pending = 0


def _auto_tqdm() -> Any:
    """`tqdm.auto.tqdm` without its one-off warning when Jupyter lacks ipywidgets (text bars then)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        from tqdm.auto import tqdm
    return tqdm


def _text_in_jupyter(tqdm: Any) -> bool:
    """True for text bars in a Jupyter kernel, whose cell output ignores cursor movement."""
    import sys

    notebook = sys.modules.get("tqdm.notebook")  # imported by tqdm.auto inside any Jupyter kernel
    widgets = notebook is not None and issubclass(tqdm, notebook.tqdm_notebook)
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None  # type: ignore[attr-defined]
    return not widgets and shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class RichBar:
    """The same bars drawn with `rich` (Lightning's RichProgressBar): one task per training
    epoch, kept, and a transient one per validation pass."""

    def __init__(self, refresh_rate: int = 1, leave: bool = False) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.refresh_rate, self.leave = refresh_rate, leave
        self._columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), TextColumn("{task.fields[postfix]}"))
        self._progress_class = Progress
        self._progress: Any = None
        self._task: Any = None
        self._val_task: Any = None
        self._pending = self._val_pending = 0

    def _ensure(self) -> Any:
        if self._progress is None:
            self._progress = self._progress_class(*self._columns, transient=False, auto_refresh=False)
            self._progress.start()
        return self._progress

    def start_train_epoch(self, epoch: int, total: int | None) -> None:
        progress = self._ensure()
        if self._task is not None and not self.leave:
            progress.remove_task(self._task)
        self._pending = 0
        self._task = progress.add_task(f"Epoch {epoch}", total=total, postfix="")
        progress.refresh()

    def advance(self, n: int = 1) -> None:
        if self._task is not None:
            self._pending += n
            if self._pending >= self.refresh_rate:
                self._progress.update(self._task, advance=self._pending, refresh=True)
                self._pending = 0

    def set_postfix(self, values: Mapping[str, float]) -> None:
        if self._task is not None and values:
            self._progress.update(self._task, postfix=" ".join(f"{k}={v:.4g}" for k, v in values.items()))

    def start_validation(self, total: int | None, desc: str = "Validation") -> None:
        self.end_validation()
        self._val_task = self._ensure().add_task(desc, total=total, postfix="")

    def advance_validation(self) -> None:
        if self._val_task is not None:
            self._val_pending += 1
            if self._val_pending >= self.refresh_rate:
                self._progress.update(self._val_task, advance=self._val_pending, refresh=True)
                self._val_pending = 0

    def end_validation(self) -> None:
        if self._val_task is not None:
            self._progress.remove_task(self._val_task)
            self._progress.refresh()
            self._val_task = None
        self._val_pending = 0

    def close(self) -> None:
        self.end_validation()
        if self._task is not None and self._pending:
            self._progress.update(self._task, advance=self._pending)
        self._pending = 0
        if self._progress is not None:
            self._progress.refresh()
            self._progress.stop()
        self._progress, self._task = None, None
