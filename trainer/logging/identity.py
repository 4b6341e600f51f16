"""A logger's run identity: what makes a resumed run continue the same run in its tracker.

A logger that can continue a run has two methods besides the `Logger` protocol's:

- `run_identity()`: plain data naming its run (a folder, a W&B or MLflow run id), or None
  while no run was started; the Trainer saves it in every checkpoint (key `"loggers"`);
- `continue_run(identity, step)`: called on resume, before the logger writes anything; the
  logger takes the saved run as its own unless it was given one of its own (an explicit
  folder or run id), and drops, hides or overwrites what that run holds for optimizer steps
  after `step` (written after the checkpoint by a run that was then killed), as far as its
  tracker allows. It returns whether it continues the saved run. `step=None` adopts a run
  without touching its data (`logger=[...]` putting folder loggers into one folder).

Folder loggers (`TensorBoardLogger`, `CSVLogger`) save `{"log_dir", "name", "version"}` and
continue in `root_dir/<name>/<version>` of the resumed logger: the same folder, found again
after the runs folder moved, as long as the experiment name is the same.

Example:
    >>> from pathlib import Path
    >>> saved = folder_identity(Path("runs/default/version_3"), Path("runs"), "default")
    >>> saved["version"]
    'version_3'
    >>> folder_to_continue(saved, Path("/data/runs"), "default")
    PosixPath('/data/runs/default/version_3')
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["ContinuesRuns", "folder_identity", "folder_to_continue", "same_folder"]


@runtime_checkable
class ContinuesRuns(Protocol):
    """A logger whose run a resume continues (see the module's docstring)."""

    def run_identity(self) -> dict[str, Any] | None: ...
    def continue_run(self, identity: Mapping[str, Any], step: int | None) -> bool: ...


def folder_identity(log_dir: Path, root_dir: Path, name: str) -> dict[str, Any]:
    """What a folder logger saves: its folder, and its name and version when it sits at
    `root_dir/name/<version>` (so a moved runs folder is found again)."""
    identity: dict[str, Any] = {"log_dir": str(log_dir)}
    if same_folder(log_dir.parent, Path(root_dir) / name):
        identity.update(name=name, version=log_dir.name)
    return identity


def folder_to_continue(identity: Mapping[str, Any], root_dir: Path, name: str) -> Path | None:
    """The folder a folder logger continues in: `root_dir/name/<version>` when the saved run
    had this experiment name, the saved folder itself when it was given explicitly, else None."""
    version = identity.get("version")
    if identity.get("name") is not None:
        return Path(root_dir) / name / str(version) if identity["name"] == name and version else None
    log_dir = identity.get("log_dir")
    return Path(log_dir) if isinstance(log_dir, str) and log_dir else None


def same_folder(a: Path, b: Path) -> bool:
    """Whether two paths name one folder (relative ones against the working directory)."""
    return Path(a).absolute().resolve() == Path(b).absolute().resolve()
