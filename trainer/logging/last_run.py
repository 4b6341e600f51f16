"""`ckpt_path="last"`: which run's checkpoints, and the newest complete one of them.

- A run whose folder is known before it starts (`Trainer(run_name=...)`, a logger with a
  `version`, `slurm-<job id>` inside a SLURM batch job): that folder's checkpoints only, so
  another run in the same `root_dir` is never picked up.
- Otherwise: the run of the newest checkpoint under `root_dir` (the one written last), and
  the resumed run continues in that run's folder.

Then `trainer/checkpoint/latest.py` picks the newest complete checkpoint of that run, falling
back past damaged ones with a warning. None found: the caller starts the run fresh, with a
note, so the same command serves the first launch and every rerun. Under DDP rank 0 decides
and every rank loads the same file.

Example:
    >>> import tempfile
    >>> find_last_of_run(tempfile.mkdtemp(), None)
    (None, None)
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

from trainer.checkpoint.latest import checkpoints_in, load_newest, written_at
from trainer.logging.runs import run_folder_of

__all__ = ["find_last_of_run", "agree_on_last", "warn_if_restarting"]

log = logging.getLogger("trainer")


def find_last_of_run(root: str | os.PathLike[str], planned: Path | None) -> tuple[dict[str, Any] | None, Path | None]:
    """The newest complete checkpoint of the run and the run's folder; (None, None) when the
    run has no checkpoint yet. `planned`: the run's folder when it is named.

    Raises:
        CheckpointError: the run has checkpoints but none of them loads.
    """
    if planned is not None:
        folder, where = planned, f"run {str(planned)!r}"
    else:
        everything = checkpoints_in(root)
        if not everything:
            return None, None
        newest = max(everything, key=written_at)
        folder = run_folder_of(newest, root)
        where = f"the newest run under root_dir, {str(folder)!r}"
    state = load_newest(checkpoints_in(folder), where)
    return (state, folder) if state is not None else (None, None)


def agree_on_last(strategy: Any, root: str | os.PathLike[str], planned: Path | None,
                  load: Any) -> tuple[dict[str, Any] | None, Path | None]:
    """`find_last_of_run` on rank 0; the other ranks load the file it chose with `load(path)`.
    A failure on rank 0 is raised on every rank (nobody is left waiting)."""
    from trainer.checkpoint.format import CheckpointError

    state: dict[str, Any] | None = None
    folder: Path | None = None
    problem: str | None = None
    if strategy.is_global_zero:
        try:
            state, folder = find_last_of_run(root, planned)
        except CheckpointError as error:
            problem = str(error)
    if strategy.world_size > 1:
        chosen = (state.get("_path") if state else None, str(folder) if folder else None, problem)
        path, where, problem = strategy.broadcast_object(chosen if strategy.is_global_zero else None)
        folder = Path(where) if where else None
        if not strategy.is_global_zero and problem is None and path is not None:
            state = load(path)
    if problem is not None:
        raise CheckpointError(problem)
    if strategy.is_global_zero:
        if state is None:
            log.info("ckpt_path='last': %s has no checkpoint yet, so the run starts from the beginning.",
                     f"run {str(planned)!r}" if planned is not None else f"root_dir {str(root)!r}")
    return state, folder



def warn_if_restarting(run_dir: Path) -> None:
    """A named run's folder that already holds last.ckpt, and a fit that starts from the
    beginning: say that it overwrites that run, and how to continue it instead."""
    last = run_dir / "last.ckpt"
    if not last.exists():
        return
    from trainer.checkpoint.latest import recorded_step, user_stacklevel

    step = recorded_step(last)
    warnings.warn(
        f"Run folder {str(run_dir)!r} already holds last.ckpt{f' (optimizer step {step})' if step is not None else ''} "
        "of an earlier run, and this fit starts from the beginning (no ckpt_path): that run's checkpoints will be "
        "replaced and its curves continue in the same folder. Pass ckpt_path='last' to continue it, or another "
        "run_name for a new run.",
        stacklevel=user_stacklevel(),
    )
