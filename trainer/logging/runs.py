"""Run folders: `root_dir/<name>/<version>`, and how a rerun of the same command finds its own.

A run's folder is, in this order:

- the one it names: `Trainer(run_name="exp1")` or `TensorBoardLogger(version="exp1")` gives
  `root_dir/default/exp1` (`version=3`: `version_3`), the same folder on every rerun;
- inside a SLURM batch job with no name given: `slurm-<SLURM_JOB_ID>`, so a requeued job (it
  keeps its id) lands in the folder of its first attempt with no extra argument;
- otherwise `version_N`, one more than the highest there, created atomically so two runs
  never share one.

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> planned_run_dir(root, "default", "exp1", environ={}).name
    'exp1'
    >>> planned_run_dir(root, "default", None, environ={"SLURM_JOB_ID": "4242"}).name
    'slurm-4242'
    >>> planned_run_dir(root, "default", None, environ={}) is None  # a new version_N when made
    True
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer._utils import check_run_name

__all__ = [
    "DEFAULT_NAME",
    "check_run_name",
    "environment_run_name",
    "make_run_dir",
    "next_version_dir",
    "planned_folder",
    "planned_run_dir",
    "release_folder",
    "version_folder",
]

#: The experiment folder of the Trainer's own runs (and TensorBoardLogger's default `name`).
DEFAULT_NAME = "default"


def version_folder(version: int | str) -> str:
    """`3` -> `version_3` (Lightning's folders); a name stays as it is."""
    return f"version_{version}" if isinstance(version, int) and not isinstance(version, bool) else str(version)


def environment_run_name(environ: Mapping[str, str] | None = None) -> str | None:
    """`slurm-<SLURM_JOB_ID>` inside a SLURM batch job, whose id a requeue keeps; else None
    (also in an interactive allocation, which is never requeued)."""
    from trainer.strategies.cluster import slurm_job

    job = slurm_job(os.environ if environ is None else environ)
    return None if job is None else f"slurm-{job}"


def planned_run_dir(
    root: str | os.PathLike[str], name: str, version: int | str | None, *, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The run's folder when it is known before the run starts (named, or from SLURM's job id);
    None when the run gets a new `version_N`. Nothing is created."""
    chosen = version if version is not None else environment_run_name(environ)
    return None if chosen is None else Path(root) / name / version_folder(chosen)


def make_run_dir(root: str | os.PathLike[str], name: str, version: int | str | None) -> Path:
    """The run's folder, created: the planned one (reused by a rerun) or a new `version_N`."""
    planned = planned_run_dir(root, name, version)
    if planned is None:
        return next_version_dir(root, name)
    planned.mkdir(parents=True, exist_ok=True)
    return planned


def next_version_dir(root: str | os.PathLike[str], name: str) -> Path:
    """`root/name/version_N` for the first N above every existing one, created atomically."""
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


def planned_folder(logger: Any, root: str | os.PathLike[str], run_name: str | None) -> Path | None:
    """The folder of a run given `Trainer(logger=...)` when it is named (run_name, a logger's
    version, SLURM's job id), without creating anything; None when it would get a new version_N."""
    if isinstance(logger, bool):
        return planned_run_dir(root, DEFAULT_NAME, run_name)
    # A folder logger (TensorBoardLogger, CSVLogger), or the first of logger=[...]: its folder is the run's.
    for each in logger if isinstance(logger, (list, tuple)) else getattr(logger, "loggers", [logger]):
        if all(hasattr(each, name) for name in ("root_dir", "name", "version", "_log_dir")):
            return each._log_dir or planned_run_dir(each.root_dir, each.name, each.version)
    return None


def release_folder(folder: Path, loggers: list[Any], root: str | os.PathLike[str], run_name: str | None) -> bool:
    """Give back the run's `folder`, a new version_N made when `trainer.log_dir` was read before a
    resuming fit (a script printing it first), while nothing was written there: the resume then
    continues its run's folder as it does without that read. False: the folder stays (a logger
    keeps it: named, given, written to; or the Trainer's own folder holds something)."""
    folders = [each for each in loggers if callable(getattr(each, "release_unused_folder", None))]
    if not all(each.release_unused_folder(check_only=True) for each in folders):
        return False
    for each in folders:
        each.release_unused_folder()
    if not folders and planned_run_dir(root, DEFAULT_NAME, run_name) is None:
        # the Trainer's own new folder (no logger, or only trackers without one: W&B, MLflow)
        if folder.exists() and next(folder.iterdir(), None) is not None:
            return False
        if folder.exists():
            folder.rmdir()
    return True


class RunFolder:
    """A logger's run folder, `root_dir/name/version` (or `version_dir`), made on first use,
    and its identity for checkpoints: what TensorBoardLogger and CSVLogger share."""

    root_dir: Path
    name: str
    version: int | str | None
    _log_dir: Path | None
    _new_version: bool = False  # `_log_dir` is a new version_N made on the first read of `log_dir`

    def _set_folder(
        self, root_dir: str | os.PathLike[str], name: str, version: int | str | None,
        version_dir: str | os.PathLike[str] | None, owner: str,
    ) -> None:
        # version="" (Lightning's way to write no version folder): the run folder is root_dir/name itself
        if version != "" and not (isinstance(version, int) and not isinstance(version, bool) and version >= 0):
            check_run_name(version, f"{owner}(version=...)")
        if version is not None and version_dir is not None:
            raise ValueError(f"{owner}: expected version= or version_dir=, not both. Received both.")
        self.root_dir = Path(root_dir)
        self.name = name
        self.version = version
        self._log_dir = Path(version_dir) if version_dir is not None else None

    @property
    def log_dir(self) -> Path:
        """The run's folder (created on first access)."""
        if self._log_dir is None:
            self._log_dir = make_run_dir(self.root_dir, self.name, self.version)
            self._new_version = planned_run_dir(self.root_dir, self.name, self.version) is None
        else:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        return self._log_dir

    def release_unused_folder(self, *, check_only: bool = False) -> bool:
        """Give back a new `version_N` this logger made when `log_dir` was read but never wrote
        to (a script printing `trainer.log_dir` before `fit(ckpt_path=...)`), removing it while
        it is empty, so a resume can hand the logger its run's folder. False: it keeps a folder
        (named, given, or written to)."""
        folder = self._log_dir
        if folder is None:
            return True
        if not getattr(self, "_new_version", False) or getattr(self, "_writer", None) is not None \
                or getattr(self, "_pending", None) or not _empty_folder(folder):
            return False
        if check_only:
            return True
        if folder.exists():
            folder.rmdir()
        self._log_dir, self._new_version = None, False
        return True

    def run_identity(self) -> dict[str, Any] | None:
        """The run's folder, saved in checkpoints (None until one was chosen)."""
        from trainer.logging.identity import folder_identity

        return None if self._log_dir is None else folder_identity(self._log_dir, self.root_dir, self.name)


def _empty_folder(folder: Path) -> bool:
    """Whether `folder` is a folder holding nothing (a missing one counts as empty)."""
    if not folder.exists():
        return True
    return folder.is_dir() and next(folder.iterdir(), None) is None
