"""The progress bar the Trainer shows by default (`tqdm.auto`: a widget in Jupyter)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """One bar per epoch for training, a transient one for validation.

    The postfix is refreshed only at logging intervals, from values the Trainer has
    already read to the host, so the bar adds no host synchronisation.
    """

    def __init__(self) -> None:
        self._bar: Any = None
        self._val_bar: Any = None

    def start_train_epoch(self, epoch: int, total: int | None) -> None:
        from tqdm.auto import tqdm

        self.close()
        self._bar = tqdm(total=total, desc=f"Epoch {epoch}", unit="batch", dynamic_ncols=True, leave=True)

    def advance(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def set_postfix(self, values: Mapping[str, float]) -> None:
        if self._bar is not None and values:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)

    def start_validation(self, total: int | None) -> None:
        from tqdm.auto import tqdm

        self._val_bar = tqdm(total=total, desc="Validation", unit="batch", dynamic_ncols=True, leave=False, position=1 if self._bar is not None else 0)

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
