"""Lightning's progress-bar callbacks: `TQDMProgressBar(refresh_rate=...)` and `RichProgressBar`.

The Trainer draws its bars itself (tqdm, on by default); one of these callbacks chooses how.
As in Lightning, at most one progress-bar callback may be given, and not together with
`enable_progress_bar=False`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

from trainer import Callback
from trainer.logging.progress import ProgressBar, RichBar

__all__ = ["TQDMProgressBar", "RichProgressBar"]


def _refresh_rate(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}(refresh_rate=...) expected an int >= 0 (0: no bar). Received: {value!r}.")
    return value


def _environment_rate(rate: int) -> int:
    """Lightning's adjustments of a tqdm bar's rate: 20 instead of 1 on Google Colab (its notebook
    front end falls behind a bar redrawn every batch), and at least `TQDM_MINITERS` when set."""
    if os.environ.get("COLAB_GPU") and rate == 1:
        return 20
    miniters = os.environ.get("TQDM_MINITERS")
    if miniters is not None:
        try:
            return max(int(miniters), rate)
        except ValueError:
            raise ValueError(f"TQDM_MINITERS={miniters!r} in the environment: expected an int (the fewest batches "
                             "between two redraws of the bar), or unset it.") from None
    return rate


class _NoBar:
    """`refresh_rate=0`: the bar is off (Lightning disables it)."""

    def start_train_epoch(self, epoch: int, total: int | None) -> None: ...
    def advance(self, n: int = 1) -> None: ...
    def set_postfix(self, values: Mapping[str, float]) -> None: ...
    def start_validation(self, total: int | None, desc: str = "Validation") -> None: ...
    def advance_validation(self) -> None: ...
    def end_validation(self) -> None: ...
    def close(self) -> None: ...


#: Lightning's TQDMProgressBar methods its own loop calls to build and fill the bars; the Trainer
#: here draws them itself, so an override of one of these would change nothing.
_LIGHTNING_BAR_METHODS = ("get_metrics", "init_sanity_tqdm", "init_train_tqdm", "init_validation_tqdm",
                          "init_test_tqdm", "init_predict_tqdm")


def _warn_unused_overrides(bar: Any) -> None:
    """A subclass that overrides what Lightning's bar calls is told, once, at construction, that
    here it has no effect (its callback hooks still run)."""
    users = [cls for cls in type(bar).__mro__ if cls is not object and cls.__module__.split(".")[0] != "callbacks"]
    names = [name for name in _LIGHTNING_BAR_METHODS if any(name in vars(cls) for cls in users)]
    if names:
        warnings.warn(
            f"{type(bar).__name__} overrides {', '.join(names)}, which Lightning's progress bar calls but this "
            "Trainer never does (it draws its bars itself), so the override has no effect. Expected: what the bar "
            "shows comes from self.log(..., prog_bar=True); for a bar of your own, pass enable_progress_bar=False "
            "and print from a Callback's hooks (docs/logging.md, \"Progress bar\").",
            UserWarning, stacklevel=3,
        )


class TQDMProgressBar(Callback):
    """The Trainer's tqdm bars, redrawn every `refresh_rate` batches (0: no bar).

    `leave=False` (Lightning's default) clears each epoch's bar when the next starts.

    Example:
        >>> from callbacks import TQDMProgressBar
        >>> TQDMProgressBar(refresh_rate=10).refresh_rate
        10
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        self.refresh_rate = _environment_rate(_refresh_rate("TQDMProgressBar", refresh_rate))
        self.process_position = process_position
        self.leave = leave
        _warn_unused_overrides(self)

    def make_progress_bar(self) -> Any:
        """What the Trainer draws with (called when a run opens its bars)."""
        return ProgressBar(self.refresh_rate, leave=self.leave) if self.refresh_rate else _NoBar()


class RichProgressBar(Callback):
    """The same bars drawn with `rich` (needs `pip install rich`, as in Lightning).

    `theme` and `console_kwargs` (Lightning's) are accepted so its code runs; the bars keep
    rich's default look.

    Raises:
        ImportError: when `rich` is not installed; use `TQDMProgressBar` then.
    """

    def __init__(self, refresh_rate: int = 1, leave: bool = False, theme: Any = None,
                 console_kwargs: dict[str, Any] | None = None) -> None:
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ImportError(
                "RichProgressBar draws with the `rich` package, which is not installed. Install it with "
                "`pip install rich`, or use callbacks.TQDMProgressBar() (the default bars need nothing)."
            ) from None
        self.refresh_rate = _refresh_rate("RichProgressBar", refresh_rate)
        self.leave = leave

    def make_progress_bar(self) -> Any:
        return RichBar(self.refresh_rate, leave=self.leave) if self.refresh_rate else _NoBar()
