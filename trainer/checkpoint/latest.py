"""`ckpt_path="last"`: which run's checkpoints, and the newest complete one of them.

**Which run.** A run whose folder is known before it starts (`Trainer(run_name=...)`, a logger
with a `version`, `slurm-<job id>` inside a SLURM batch job) reads that folder's checkpoints
only, so another run in the same `root_dir` is never picked up. Otherwise it is the newest run
under `root_dir` of the same experiment (the module's class and hyperparameters, ...: `run_facts`),
and the resumed run continues in that run's folder. Under DDP rank 0 decides and every rank
loads the same file (`agree_on_last`).

A run's checkpoints are every checkpoint it wrote in its folder: `last.ckpt`, the older
`last-step=N.ckpt` that `keep_last_checkpoints` keeps, and ModelCheckpoint's files in
`checkpoints/` (files, or FSDP's folders). Files whose name starts with a dot (temporaries
of saves in flight or cut short) are never candidates; nor are weights-only files (they can't
resume) or files of another format.

**Newest** means the one written last (modification time; the step recorded inside breaks
ties): a run restarted from scratch in the same folder continues its latest attempt, not an
abandoned one with more steps. The recorded step is read cheaply (the archive's index,
memory-mapped, not its tensors) and named in messages.

**Complete** means it loads: the whole-file checksum matches and every part a resume reads is
there. When the newest is damaged (a truncated file, a flipped byte) the previous complete one
is used, with a warning naming both; when every checkpoint is damaged, an error names them
all. No checkpoint at all is not an error here: the caller starts the run fresh, with a note,
so the same command serves the first launch and every rerun.

The candidates, found and peeked at: `candidates.py`; what makes a run the same experiment:
`run_facts.py`.

Example:
    >>> import tempfile
    >>> checkpoints_in(tempfile.mkdtemp())
    []
    >>> find_last_of_run(tempfile.mkdtemp(), None)
    (None, None)
"""

from __future__ import annotations
import logging
import os
import sys
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.checkpoint.candidates import (Candidate, _peek, checkpoints_in, peek, recorded_step, run_folder_of,
                                           written_at)
from trainer.checkpoint.format import CheckpointError, check_layout, load_checkpoint
from trainer.checkpoint.run_facts import RunOf, differences, facts_of_run, run_facts
from trainer.checkpoint.sharded import read_sharded
from trainer.checkpoint.storage import Location, RemotePath, location

__all__ = [
    "Candidate", "agree_on_last", "checkpoints_in", "differences", "facts_of_run", "find_last_of_run", "load_newest",
    "note", "peek", "recorded_step", "run_facts", "run_folder_of", "user_stacklevel",
    "written_at",
]

log = logging.getLogger("trainer")


def _load(path: Location) -> dict[str, Any]:
    if isinstance(path, RemotePath):  # a single file, or the commit of FSDP's shards in a bucket
        from trainer.checkpoint.sharded_remote import attach_shards

        state = attach_shards(load_checkpoint(path), path)
    else:
        state = read_sharded(path) if path.is_dir() else load_checkpoint(path)
    check_layout(state)
    return state


def load_newest(paths: list[Location], where: str) -> dict[str, Any] | None:
    """Load the newest complete checkpoint of `paths` (see the module); None when there is
    none at all. `where` names the run for messages.

    Raises:
        CheckpointError: there are checkpoints, but none of them loads (each one named).
    """
    candidates = [_peek(Candidate(path, written_at(path)), facts=False) for path in paths]
    candidates = [c for c in candidates if c.resumable]
    candidates.sort(key=lambda c: (c.mtime_ns, c.step if c.step is not None else -1, c.path.name == "last.ckpt"), reverse=True)
    damaged: list[Candidate] = []
    for candidate in candidates:
        if candidate.problem is None:
            try:
                state = _load(candidate.path)
            except CheckpointError as error:
                candidate.problem = str(error)
            else:
                if damaged:
                    _warn_fallback(damaged, candidate, where)
                return state
        damaged.append(candidate)
    if damaged:
        listed = "; ".join(f"{str(c.path)!r}: {c.problem}" for c in damaged)
        raise CheckpointError(
            f"ckpt_path='last': every checkpoint of {where} is damaged, so there is nothing to resume from "
            f"({listed}). Expected at least one complete checkpoint; pass ckpt_path=None to start over."
        )
    return None


def _warn_fallback(damaged: list[Candidate], chosen: Candidate, where: str) -> None:
    newest = damaged[0]
    others = "".join(f"; also skipped {str(c.path)!r} ({c.problem})" for c in damaged[1:])
    step = f"optimizer step {chosen.step}" if chosen.step is not None else "its recorded step"
    warnings.warn(
        f"ckpt_path='last': the newest checkpoint of {where}, {str(newest.path)!r}, is damaged ({newest.problem}); "
        f"resuming from the previous complete one, {str(chosen.path)!r} ({step}){others}. The steps after it "
        "are trained again.",
        stacklevel=user_stacklevel(),
    )


_PACKAGE = str(Path(__file__).resolve().parents[1])  # the trainer package's folder


def user_stacklevel() -> int:
    """The `stacklevel` that makes a warning point at the first caller outside the trainer
    package (the user's `fit(...)` line), however deep inside it the warning is raised."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def find_last_of_run(root: str | os.PathLike[str] | RemotePath, planned: Location | None,
                     expected: Mapping[str, Any] | None = None,
                     evaluating: bool = False) -> tuple[dict[str, Any] | None, Location | None]:
    """The newest complete checkpoint of the run and the run's folder; (None, None) when the
    run has no checkpoint yet. `planned`: the run's folder when it is named. `expected`: this
    run's `run_facts` (None: any run): an unnamed run continues the newest run of the same
    experiment only, a named run's checkpoint of another experiment is refused. `evaluating`:
    for validate/test/predict, which start no run: finding only other experiments' runs is an error.

    Raises:
        CheckpointError: the run has checkpoints but none of them loads, or a named run's
            checkpoint is of another experiment.
    """
    if planned is not None:
        folder, where = planned, f"run {str(planned)!r}"
    else:
        everything = checkpoints_in(root)
        if not everything:
            return None, None
        chosen = _newest_run_of_experiment(everything, root, expected, evaluating)
        if chosen is None:
            return None, None
        folder = chosen
        where = f"the newest run of this experiment under root_dir, {str(folder)!r}"
    state = load_newest(checkpoints_in(folder), where)
    if state is None:
        return None, None
    if expected is not None:
        differs = differences(run_facts(state, location(state.get("_path", folder))), expected)
        if differs:
            raise CheckpointError(
                f"ckpt_path='last': {where} holds {str(state.get('_path'))!r}, written by another experiment: "
                f"{differs}. Continuing it would mix two experiments in one run. Expected the settings it was "
                "written with. To start this experiment instead, give it another run_name; to continue that run "
                "with the new settings anyway, pass the checkpoint's path as ckpt_path."
            )
    return state, folder


def _newest_run_of_experiment(everything: list[Location], root: str | os.PathLike[str] | RemotePath,
                              expected: Mapping[str, Any] | None, evaluating: bool = False) -> Location | None:
    """The folder of the newest run under `root` whose newest readable checkpoint is of this
    experiment; runs of other experiments are passed over (said in one INFO line), and None
    when no run is of this experiment."""
    runs: dict[Location, list[Location]] = {}
    for path in everything:
        runs.setdefault(run_folder_of(path, root), []).append(path)
    order = sorted(runs, key=lambda run: max(written_at(p) for p in runs[run]), reverse=True)
    if expected is None:
        return order[0]
    passed: list[str] = []
    for run in order:
        candidates = [c for c in (peek(p) for p in runs[run]) if c.resumable]
        readable = [c for c in candidates if c.problem is None and c.run is not None]
        if not candidates:
            continue  # weights-only files or other formats: nothing there resumes
        if not readable:
            return run  # damaged only: load_newest says so, naming every file
        newest = max(readable, key=lambda c: (c.mtime_ns, c.step if c.step is not None else -1))
        differs = differences(newest.run or {}, expected)
        if not differs:
            if passed:
                log.info("ckpt_path='last': continuing %s; passed over newer runs of other experiments: %s.",
                         str(run), "; ".join(passed))
            return run
        passed.append(f"{str(run)!r} ({differs})")
    if not passed:
        log.info("ckpt_path='last': root_dir %r has no checkpoint to resume yet, so the run starts from the "
                 "beginning.", str(root))
        return None
    if evaluating:
        raise CheckpointError(
            f"ckpt_path='last': no run under root_dir {str(root)!r} is of this model, so there is nothing to evaluate "
            f"(the runs there differ: {'; '.join(passed)}). Expected a run of this model class with these "
            "hyperparameters; to evaluate one of those anyway, pass its checkpoint's path as ckpt_path."
        )
    note(logging.INFO, "ckpt_path='last': no run under root_dir %r is of this experiment, so the run starts from the "
         "beginning in a new folder (the runs there differ: %s). To continue one of them anyway, pass its "
         "checkpoint's path.", str(root), "; ".join(passed))
    return None


def note(level: int, message: str, *args: Any) -> None:
    """A line a plain script shows with no logging configured (Python's last-resort handler
    prints warnings only): at `level` through the user's handlers, else as a warning."""
    log.log(level if log.hasHandlers() else max(level, logging.WARNING), message, *args)


def agree_on_last(strategy: Any, root: str | os.PathLike[str] | RemotePath, planned: Location | None, load: Any,
                  expected: Mapping[str, Any] | None = None, evaluating: bool = False
                  ) -> tuple[dict[str, Any] | None, Location | None]:
    """`find_last_of_run` on rank 0; the other ranks load the file it chose with
    `load(path, verify=False)`: rank 0 has just checked that file's checksum (a full read), and
    `root_dir` is on a file system every rank shares, so the other ranks read only what they use
    (the tensors are memory-mapped). A failure on rank 0 is raised on every rank (nobody is left waiting)."""
    state: dict[str, Any] | None = None
    folder: Location | None = None
    problem: str | None = None
    if strategy.is_global_zero:
        try:
            state, folder = find_last_of_run(root, planned, expected, evaluating)
        except CheckpointError as error:
            problem = str(error)
    if strategy.world_size > 1:
        chosen = (state.get("_path") if state else None, str(folder) if folder else None, problem)
        path, where, problem = strategy.broadcast_object(chosen if strategy.is_global_zero else None)
        folder = location(where, getattr(root, "options", None)) if where else None
        if not strategy.is_global_zero and problem is None and path is not None:
            state = load(path, verify=False)
    if problem is not None:
        raise CheckpointError(problem)
    if strategy.is_global_zero and not evaluating:  # an evaluation without a checkpoint raises instead
        if state is None and (planned is not None or expected is None or not checkpoints_in(root)):  # else: said above
            log.info("ckpt_path='last': %s has no checkpoint yet, so the run starts from the beginning.",
                     f"run {str(planned)!r}" if planned is not None else f"root_dir {str(root)!r}")
    return state, folder
