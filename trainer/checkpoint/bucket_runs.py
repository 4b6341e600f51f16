"""A run whose `root_dir` is a URL (`s3://bucket/exp`): its checkpoints in the bucket, its logs here.

The run's checkpoints go to the bucket, its logs (TensorBoard, CSV, config.yaml) to the local
folder `runs/<bucket>/<prefix>` (`log_root`); a run's folder has the same relative name in both
(`default/version_3`, `default/<run_name>`): `checkpoint_folder` maps the local one to the
bucket's, `log_folder` back, and `taken_versions` keeps a new run off another machine's folder.

Example:
    >>> log_root("s3://bucket/exp"), log_root("runs")
    (PosixPath('runs/bucket/exp'), PosixPath('runs'))
    >>> checkpoint_folder(Path("runs/bucket/exp/default/version_3"), "s3://bucket/exp")
    RemotePath('s3://bucket/exp/default/version_3')
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.checkpoint.storage import Location, RemotePath, is_remote, location

__all__ = ["checkpoint_folder", "log_folder", "log_root", "taken_versions"]


def log_root(root_dir: str | os.PathLike[str]) -> Path:
    """The local folder of a run's logs: `root_dir` itself, or `runs/<bucket>/<prefix>` for a URL."""
    if is_remote(root_dir):
        return Path("runs") / str(root_dir).partition("://")[2].strip("/")
    return Path(root_dir)


def checkpoint_folder(run_dir: Path, root_dir: str | os.PathLike[str], options: Mapping[str, Any] | None = None
                      ) -> Location:
    """Where the run whose (local) folder is `run_dir` keeps its checkpoints."""
    if not is_remote(root_dir):
        return run_dir
    remote = location(str(root_dir), options)
    try:
        relative = Path(run_dir).absolute().relative_to(log_root(root_dir).absolute())
    except ValueError:  # a logger's folder outside runs/<bucket>/...: its last two names
        relative = Path(Path(run_dir).parent.name) / Path(run_dir).name
    return remote / relative.as_posix()


def log_folder(folder: Location, root_dir: str | os.PathLike[str]) -> Path:
    """The local folder of the run whose checkpoints are in `folder` (the reverse of `checkpoint_folder`)."""
    if not isinstance(folder, RemotePath):
        return folder
    remote = location(str(root_dir))
    if isinstance(remote, RemotePath) and folder.is_relative_to(remote) and folder != remote:
        return log_root(root_dir) / folder.key[len(remote.key) + 1:]
    return log_root(root_dir) / folder.parent.name / folder.name


def taken_versions(root_dir: str | os.PathLike[str], name: str, options: Mapping[str, Any] | None = None) -> list[int]:
    """The `version_N` numbers of runs already in the bucket (another machine's runs), so that a
    new run never takes one of their folders; [] for a local root_dir."""
    if not is_remote(root_dir):
        return []
    parent = location(str(root_dir), options)
    assert isinstance(parent, RemotePath)
    found = []
    for entry in (parent / name).iterdir():
        number = entry.name[len("version_"):]
        if entry.name.startswith("version_") and number.isdigit():
            found.append(int(number))
    return found
