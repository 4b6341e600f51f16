"""`logger=[...]`: several loggers written as one.

Every logger gets the same scalars at the same steps, the same hyperparameters and config.
Folder loggers with the same `root_dir` and `name` (`TensorBoardLogger` and `CSVLogger`)
share the first one's run folder, so one run is one folder; the run's folder
(`trainer.log_dir`, where `last.ckpt` goes) is the first logger's that has one.

`close` closes every logger even when one of them fails, then raises the first error.

Example:
    >>> import tempfile
    >>> from trainer.loggers import CSVLogger, TensorBoardLogger
    >>> root = tempfile.mkdtemp()
    >>> both = LoggerList([TensorBoardLogger(root), CSVLogger(root)])
    >>> both.log_metrics({"train/loss": 0.5}, step=1)
    >>> both.close()
    >>> sorted(p.name for p in both.log_dir.iterdir() if not p.name.startswith("events"))
    ['metrics.csv']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.logging.base import finish, log_hyperparams, write
from trainer.logging.identity import same_folder

__all__ = ["LoggerList"]


class LoggerList:
    """Writes to each of `loggers`, in order (`trainer.loggers` is the list)."""

    def __init__(self, loggers: Sequence[Any]) -> None:
        self.loggers = list(loggers)
        self._shared = False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loggers)

    def __len__(self) -> int:
        return len(self.loggers)

    @property
    def log_dir(self) -> Path | None:
        """The first logger's folder that has one (None when none has)."""
        self._share_folder()
        for logger in self.loggers:
            folder = getattr(logger, "log_dir", None)
            if folder is not None:
                return Path(folder)
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._share_folder()
        for logger in self.loggers:
            write(logger, metrics, step)

    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None,
                        lightning_params: Mapping[str, Any] | None = None) -> None:
        """`params` to each logger; `lightning_params`, when given, to those written the Lightning way."""
        self._share_folder()
        for logger in self.loggers:
            log_hyperparams(logger, params, lightning_params, metrics)

    def finish(self, failed: bool) -> None:
        """The run's end for each logger (`base.finish`), even when one of them fails; then the first error."""
        first: BaseException | None = None
        for logger in self.loggers:
            try:
                finish(logger, failed)
            except Exception as error:  # noqa: BLE001 - the others still finish; re-raised below
                first = first or error
        if first is not None:
            raise first

    def flush(self) -> None:
        self._each("flush")

    def close(self) -> None:
        self._each("close")

    def __repr__(self) -> str:
        return f"LoggerList({self.loggers!r})"

    def _each(self, method: str) -> None:
        first: BaseException | None = None
        for logger in self.loggers:
            try:
                getattr(logger, method)()
            except Exception as error:  # noqa: BLE001 - the others still flush/close; re-raised below
                first = first or error
        if first is not None:
            raise first

    def _share_folder(self) -> None:
        """Before the first write: folder loggers of one experiment use the first one's folder."""
        if self._shared:
            return
        self._shared = True
        folders = [lg for lg in self.loggers if _is_folder_logger(lg)]
        if len(folders) < 2:
            return
        lead = folders[0]
        for other in folders[1:]:
            if other.name == lead.name and same_folder(Path(other.root_dir), Path(lead.root_dir)):
                folder = Path(lead.log_dir)
                other.continue_run({"log_dir": str(folder), "name": lead.name, "version": folder.name}, None)


def _is_folder_logger(logger: Any) -> bool:
    """A logger that keeps its files in `root_dir/name/<version>` (looked up on the class:
    reading `log_dir` would make the folder)."""
    return (
        hasattr(type(logger), "log_dir") and hasattr(logger, "root_dir") and isinstance(getattr(logger, "name", None), str)
        and callable(getattr(logger, "continue_run", None))
    )
