"""`trainer.checkpoint_callback` without a `ModelCheckpoint`: Lightning's Trainer adds a default
one (monitor=None: its newest epoch-end file is "best"); this Trainer writes `last.ckpt` at every
epoch end instead, so the view reports that file, and projects that read
`trainer.checkpoint_callback.best_model_path` after `fit` load it as they would Lightning's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DefaultCheckpoint"]


class DefaultCheckpoint:
    """Read-only: the attributes Lightning's default `ModelCheckpoint` has, over this Trainer's
    `last.ckpt` (an empty string until a fit of this Trainer wrote it)."""

    monitor: str | None = None
    mode = "min"
    save_top_k = 1
    best_model_score: Any = None
    last_model_path = ""  # Lightning's default keeps no separate last.ckpt

    def __init__(self, best_path: Callable[[], str], folder: Callable[[], Any]) -> None:
        self._best_path, self._folder = best_path, folder

    @property
    def best_model_path(self) -> str:
        return self._best_path()

    @property
    def best_k_models(self) -> dict[str, Any]:
        """Empty, as Lightning's default callback (monitor=None) keeps it."""
        return {}

    @property
    def kth_best_model_path(self) -> str:
        return self.best_model_path

    @property
    def dirpath(self) -> str:
        return str(self._folder())

    def __repr__(self) -> str:
        return f"DefaultCheckpoint(best_model_path={self.best_model_path!r})"
