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

__all__ = ["ProgressBar"]


class ProgressBar:
    """Draws the training and validation bars; `close` is safe to call at any time."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._val_bar: Any = None

    def start_train_epoch(self, epoch: int, total: int | None) -> None:
        tqdm = _auto_tqdm()
        self.close()
        self._bar = tqdm(total=total, desc=f"Epoch {epoch}", unit="batch", dynamic_ncols=True, leave=True, position=0)

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def set_postfix(self, values: Mapping[str, float]) -> None:
        """Show `values` after the bar (drawn with the next update, not immediately)."""
        if self._bar is not None and values:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)

    def start_validation(self, total: int | None, desc: str = "Validation") -> None:
        tqdm = _auto_tqdm()
        self.end_validation()
        below = self._bar is not None
        # Text bars in a Jupyter cell can't move the cursor up: draw over the training line instead.
        nested = below and not _text_in_jupyter(tqdm)
        if below:
            self._bar.refresh()  # show the finished count and postfix before drawing below it
        self._val_bar = tqdm(
            total=total, desc=desc, unit="batch", dynamic_ncols=True, leave=not below, position=1 if nested else 0
        )

    def advance_validation(self) -> None:
        if self._val_bar is not None:
            self._val_bar.update(1)

    def end_validation(self) -> None:
        if self._val_bar is not None:
            self._val_bar.close()
            self._val_bar = None

    def close(self) -> None:
        self.end_validation()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


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
