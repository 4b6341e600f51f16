"""Which files a `ModelCheckpoint` keeps: the top k by score, the best one, `last.ckpt`, names
versioned when a file of that name exists, and this bookkeeping as the callback's checkpoint state.

`KeptFiles` is a base of `ModelCheckpoint`, which sets the attributes it reads and writes in its
`__init__` (Lightning's names: `best_k_models`, `best_model_path`, `kth_best_model_path`, ...).
"""

from __future__ import annotations

from typing import Any, Literal

from trainer.logging.reduction import MetricValue

__all__ = ["KeptFiles"]


class KeptFiles:
    """Lightning's top-k bookkeeping of `ModelCheckpoint` and its state in a checkpoint."""

    _dir: Any  # the folder (a Path, or a RemotePath for a URL)
    monitor: str | None
    mode: Literal["min", "max"]
    save_top_k: int
    enable_version_counter: bool
    best_k_models: dict[str, float]
    best_model_path: str
    best_model_score: float | None
    kth_best_model_path: str
    kth_value: float
    current_score: float | None
    last_model_path: str
    _last_saved_step: int
    _pending: dict[str, Any] | None

    def _admits(self, score: float) -> bool:
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        kth = self.best_k_models[self.kth_best_model_path]
        return score < kth if self.mode == "min" else score > kth

    def _replaced(self) -> str | None:
        """The file a new top-k file pushes out (Lightning's kth best), if the top k is full."""
        full = self.save_top_k != -1 and 0 < self.save_top_k == len(self.best_k_models)
        return self.kth_best_model_path if full else None

    def _versioned(self, name: str, replaced: str | None) -> str:
        """`name`, or `name-vN` when a file of that name exists and is not the one this save replaces."""
        if not self.enable_version_counter or self._dir is None:
            return name
        candidate, version = name, 1
        while (self._dir / f"{candidate}.ckpt").exists() and str(self._dir / f"{candidate}.ckpt") != replaced:
            candidate, version = f"{name}-v{version}", version + 1
        return candidate

    def _record(self, path: str, score: float | None) -> list[str]:
        """Lightning's top-k bookkeeping for a new file; returns the file it replaces."""
        if self.monitor is None or score is None:
            previous, self.best_model_path = self.best_model_path, path
            return [previous] if self.save_top_k == 1 else []
        models = self.best_k_models
        replaced = self._replaced()
        if replaced is not None:
            models.pop(replaced, None)
        self.current_score = score
        models[path] = score
        if self.save_top_k == -1 or len(models) == self.save_top_k:
            pick = max if self.mode == "min" else min
            self.kth_best_model_path = pick(models, key=models.__getitem__)
            self.kth_value = models[self.kth_best_model_path]
        best = (min if self.mode == "min" else max)(models, key=models.__getitem__)
        self.best_model_path, self.best_model_score = best, models[best]
        return [replaced] if replaced is not None else []

    # ------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "dirpath": str(self._dir) if self._dir is not None else None,
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "current_score": self.current_score,
            "last_model_path": self.last_model_path,
            "last_saved_step": self._last_saved_step,
            "pending": dict(self._pending) if self._pending is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        monitored = self.monitor is not None
        self.best_k_models = {str(k): MetricValue(v) for k, v in state.get("best_k_models", {}).items()} if monitored else {}
        self.best_model_path = str(state.get("best_model_path", ""))
        score = state.get("best_model_score")
        self.best_model_score = MetricValue(score) if score is not None and monitored else None
        self.kth_best_model_path = str(state.get("kth_best_model_path", ""))
        models = self.best_k_models
        if models and self.kth_best_model_path not in models and self.save_top_k in (-1, len(models)):
            pick = max if self.mode == "min" else min  # a file written before the kth best was kept
            self.kth_best_model_path = pick(models, key=models.__getitem__)
        self.kth_value = MetricValue(state.get("kth_value", models.get(self.kth_best_model_path, self.kth_value)))
        current = state.get("current_score")
        self.current_score = MetricValue(current) if current is not None else None
        self.last_model_path = str(state.get("last_model_path", ""))
        self._last_saved_step = int(state.get("last_saved_step") or 0)
        pending = state.get("pending")
        self._pending = dict(pending) if pending is not None else None
