"""Loggers: where scalars and hyperparameters go. `TensorBoardLogger` is the default.

`torch.utils.tensorboard` (and so tensorboard itself) is imported only when the first
event is written, so `import trainer` stays fast.

Example:
    >>> import tempfile
    >>> from trainer.loggers import TensorBoardLogger
    >>> logger = TensorBoardLogger(tempfile.mkdtemp())
    >>> logger.log_metrics({"train/loss": 0.5}, step=1)
    >>> logger.close()
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["Logger", "TensorBoardLogger"]


@runtime_checkable
class Logger(Protocol):
    """What the Trainer needs from a logger."""

    @property
    def log_dir(self) -> Path: ...
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def next_version_dir(root: Path, name: str) -> Path:
    """`root/name/version_N` for the first N not taken, created atomically (never reused)."""
    parent = Path(root) / name
    parent.mkdir(parents=True, exist_ok=True)
    taken = [int(m.group(1)) for p in parent.iterdir() if (m := re.fullmatch(r"version_(\d+)", p.name))]
    version = max(taken, default=-1) + 1
    while True:
        candidate = parent / f"version_{version}"
        try:
            candidate.mkdir()  # atomic: two processes can't both get the same folder
            return candidate
        except FileExistsError:
            version += 1


class TensorBoardLogger:
    """Writes TensorBoard event files with `torch.utils.tensorboard.SummaryWriter`.

    Args:
        root_dir: the folder runs go under.
        name: a sub-folder for this experiment; each run gets `root_dir/name/version_N`.
        version_dir: use exactly this folder instead of a new version folder.
    """

    def __init__(self, root_dir: str | os.PathLike[str] = "runs", name: str = "default", *, version_dir: str | os.PathLike[str] | None = None) -> None:
        self.root_dir = Path(root_dir)
        self.name = name
        self._log_dir: Path | None = Path(version_dir) if version_dir is not None else None
        self._writer: Any = None

    @property
    def log_dir(self) -> Path:
        """The run's folder (created on first access)."""
        if self._log_dir is None:
            self._log_dir = next_version_dir(self.root_dir, self.name)
        return self._log_dir

    @property
    def writer(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        return self._writer

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None:
        flat = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in _flatten(params).items()}
        self.writer.add_hparams(flat, dict(metrics or {}), run_name=".")

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out
