"""`CSVLogger`: scalars in a `metrics.csv` a person can open, no extra dependency.

Lightning's layout: one row per write (the training values of a logging step; an epoch's
training means; a validation's results; a test's), each with its `step` and, from the
Trainer, its `epoch`; the columns in sorted order, `step` among them. A validation and the
epoch's training means written at one step stay two rows (each with its own epoch), as in
Lightning, so `pandas.read_csv(...).set_index("epoch")` keeps every epoch. When a metric
appears that the file has no column for, the file is rewritten with the wider header
(a new file renamed over the old one: a reader never sees half a file); otherwise rows are
appended. Values are written as Python writes them (`repr` of a float, an int as an int).
Hyperparameters go to `hparams.yaml` beside it.

Rows are written every `flush_every` rows, at every epoch's end, before every checkpoint
and when `fit` ends; a resumed run drops the rows its folder holds for steps after the
checkpoint's (written by a run that was killed after it), so no step is written twice.

Example:
    >>> import csv, tempfile
    >>> from trainer.loggers import CSVLogger
    >>> logger = CSVLogger(tempfile.mkdtemp())
    >>> logger.log_metrics({"train/loss": 0.5}, step=1)
    >>> logger.log_metrics({"train/loss": 0.25}, step=2)
    >>> logger.log_metrics({"val/loss": 0.3}, step=2)
    >>> logger.close()
    >>> with open(logger.log_dir / "metrics.csv", newline="") as f:
    ...     print(list(csv.reader(f)))
    [['step', 'train/loss', 'val/loss'], ['1', '0.5', ''], ['2', '0.25', ''], ['2', '', '0.3']]
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trainer.logging.identity import folder_to_continue, same_folder
from trainer.logging.params import plain_params, write_atomic, write_hparams_yaml
from trainer.logging.tensorboard import with_prefix
from trainer.logging.runs import RunFolder, planned_run_dir

__all__ = ["CSVLogger"]

log = logging.getLogger("trainer")


class CSVLogger(RunFolder):
    """Writes `metrics.csv` and `hparams.yaml` into `root_dir/name/version_N`.

    Args:
        root_dir: the folder runs go under.
        name: a sub-folder for this experiment (the same scheme as `TensorBoardLogger`, so
            both in `logger=[...]` share one run folder).
        version: name the run's folder (`root_dir/name/<version>`; an int `n` gives
            `version_n`); None: a new `version_N` (`slurm-<job id>` in a SLURM batch job).
        version_dir: write into exactly this folder instead of a new version folder.
        flush_every: write pending rows once this many have gathered (also at every epoch's
            end, before a checkpoint and when `fit` ends).
        save_dir: Lightning's name of `root_dir`; `name=None` or `""` puts the runs directly
            in it, as Lightning does.
        prefix: Lightning's: columns become `<prefix>-<name>`.
        flush_logs_every_n_steps: Lightning's name of `flush_every`.

    Example:
        >>> import tempfile
        >>> from trainer import Trainer
        >>> from trainer.loggers import CSVLogger, TensorBoardLogger
        >>> root = tempfile.mkdtemp()
        >>> trainer = Trainer(root_dir=root, logger=[TensorBoardLogger(root), CSVLogger(root)])
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str] = "runs",
        name: str | None = "default",
        *,
        version: int | str | None = None,
        version_dir: str | os.PathLike[str] | None = None,
        flush_every: int = 100,
        save_dir: str | os.PathLike[str] | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int | None = None,
    ) -> None:
        if save_dir is not None:  # Lightning's name of root_dir
            root_dir = save_dir
        if flush_logs_every_n_steps is not None:
            flush_every = flush_logs_every_n_steps
        if name is None or name == "":  # Lightning: no experiment sub-folder
            name = ""
        elif not isinstance(name, str):  # "csv/" or "exp/run" are sub-folders, as in Lightning
            raise ValueError(f"CSVLogger(name=...) expected a folder name such as 'mlp' (or 'exp/mlp'), or None. "
                             f"Received: {name!r} of type {type(name).__name__}.")
        if not isinstance(prefix, str):
            raise ValueError(f"CSVLogger(prefix=...) expected a string. Received: {prefix!r}.")
        if isinstance(flush_every, bool) or not isinstance(flush_every, int) or flush_every < 1:
            raise ValueError(f"CSVLogger(flush_every=...) expected an int >= 1. Received: {flush_every!r}.")
        self._set_folder(root_dir, name, version, version_dir, "CSVLogger")
        self.flush_every = flush_every
        self.prefix = prefix
        self._columns: list[str] = []  # every column so far, sorted (Lightning's order)
        self._file_columns: list[str] = []  # the header of the file on disk
        self._pending: list[dict[str, Any]] = []
        self._drop_after: int | None = None  # a resume: rows above this step go on first write
        self._opened = False

    # ------------------------------------------------------------------ the run's folder
    @property
    def save_dir(self) -> Path:
        """Lightning's name of `root_dir`."""
        return self.root_dir

    @property
    def metrics_path(self) -> Path:
        return self.log_dir / "metrics.csv"

    def continue_run(self, identity: Mapping[str, Any], step: int | None) -> bool:
        """Continue the saved run's `metrics.csv`; with `step`, its rows after `step` are dropped."""
        target = folder_to_continue(identity, self.root_dir, self.name)
        own = self._log_dir
        if own is None and self.version is not None:
            own = planned_run_dir(self.root_dir, self.name, self.version)
        if target is None or (own is not None and not same_folder(own, target)):
            return False  # no saved folder for this experiment name, or a folder of its own
        self._log_dir = target
        self._opened = False  # the next write reads the file's header and last step again
        if step is not None:
            self._drop_after = int(step)
        return True

    # ------------------------------------------------------------------------ writing
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """One row: `metrics` at `step`."""
        if not metrics:
            return
        if len(self._pending) >= self.flush_every:
            self.flush()
        row: dict[str, Any] = {name: _value(value) for name, value in with_prefix(metrics, self.prefix).items()}
        row["step"] = int(step)
        self._pending.append(row)

    def written_at(self, step: int, names: Iterable[str]) -> set[str]:
        """Which of `names` the run's `metrics.csv` (and the rows not yet written) already hold at
        `step`: a resumed run's first values, when the run it continues got that far before it
        stopped, are not written as a second row."""
        wanted = {f"{self.prefix}-{name}" if self.prefix else name: name for name in names}
        if self._log_dir is None or not wanted:
            return set()
        existing = _read(self.metrics_path)
        rows = [*(existing[1] if existing is not None else []), *self._pending]
        return {wanted[key] for row in rows if _step_of(row) == step
                for key, value in row.items() if key in wanted and value not in ("", None)}

    def log_hyperparams(self, params: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None:
        """Write `hparams.yaml` (nested as given; values YAML can't hold become text). Later calls
        add to what earlier ones logged (a key logged again takes the new value), as Lightning's."""
        logged = getattr(self, "_logged_hparams", {})
        logged.update(plain_params(dict(params)))
        self._logged_hparams = logged
        write_hparams_yaml(self.log_dir, logged)
        if metrics:
            self.log_metrics(metrics, step=0)

    def flush(self) -> None:
        """Write the pending rows: appended, or the whole file rewritten when its header
        must widen."""
        if not self._pending and self._drop_after is None:
            return
        path = self.metrics_path
        if not self._opened:
            self._open(path)
        rows, self._pending = self._pending, []
        new = {name for row in rows for name in row} - set(self._columns)
        self._columns = sorted([*self._columns, *new])
        if self._drop_after is not None or self._columns != self._file_columns:
            self._rewrite(path, rows)
        elif rows:
            with open(path, "a", newline="", encoding="utf-8") as handle:
                csv.DictWriter(handle, self._columns, restval="", lineterminator="\n").writerows(_formatted(r) for r in rows)

    def close(self) -> None:
        self.flush()

    def __repr__(self) -> str:
        where = str(self._log_dir) if self._log_dir is not None else str(self.root_dir / self.name / "version_?")
        return f"CSVLogger({where!r})"

    # ------------------------------------------------------------------------ helpers
    def _open(self, path: Path) -> None:
        """First write of this logger: take over the header of a file that is already there
        (a continued run), so rows are added to it, never over it."""
        self._opened = True
        existing = _read(path)
        if existing is None:
            return
        header, _ = existing
        self._columns = sorted({*header, *self._columns})
        self._file_columns = header

    def _rewrite(self, path: Path, rows: list[dict[str, Any]]) -> None:
        existing = _read(path)
        old: list[dict[str, Any]] = existing[1] if existing is not None else []
        if self._drop_after is not None:
            kept = [r for r in old if int(float(r["step"])) <= self._drop_after]
            if len(kept) < len(old):
                log.info("CSVLogger: dropped %d row(s) after step %d from %s (written after the checkpoint "
                         "this run resumed from).", len(old) - len(kept), self._drop_after, path)
            old, self._drop_after = kept, None
        text = _to_csv(self._columns, old + [_formatted(r) for r in rows])
        write_atomic(path, text)
        self._file_columns = list(self._columns)


def _step_of(row: Mapping[str, Any]) -> int | None:
    try:
        return int(float(row["step"]))
    except (KeyError, TypeError, ValueError):
        return None


def _value(value: Any) -> Any:
    """A value as Lightning writes it: a tensor's or NumPy scalar's Python number, an int as
    an int, anything else as a float."""
    if not isinstance(value, (int, float)) and callable(getattr(value, "item", None)):
        value = value.item()
    return value if isinstance(value, (int, float)) else float(value)


def _formatted(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()}


def _to_csv(columns: list[str], rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _read(path: Path) -> tuple[list[str], list[dict[str, Any]]] | None:
    if not path.exists():
        return None
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = [dict(row) for row in reader]
        return list(reader.fieldnames or ["step"]), rows
