"""`ckpt_path="last"`: the newest complete checkpoint of a run, with a fallback when it is damaged.

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
all. No checkpoint at all is not an error here: the caller starts the run fresh.

Example:
    >>> import tempfile
    >>> checkpoints_in(tempfile.mkdtemp())
    []
"""

from __future__ import annotations

import logging
import os
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint.format import FORMAT, CheckpointError, check_layout, load_checkpoint
from trainer.checkpoint.sharded import STATE_FILE, read_sharded

__all__ = ["Candidate", "checkpoints_in", "load_newest", "peek", "recorded_step", "run_facts", "user_stacklevel", "written_at"]

log = logging.getLogger("trainer")

_SUFFIX = ".ckpt"


@dataclass
class Candidate:
    """A checkpoint a run wrote: where, when, and (once peeked) its step or why it is unusable."""

    path: Path
    mtime_ns: int
    step: int | None = None
    problem: str | None = None  # damaged: why; None: readable so far
    resumable: bool = True  # False: weights only, or not this trainer's format (skipped quietly)
    run: dict[str, Any] | None = None  # what the run was (`run_facts`), once peeked


def run_facts(state: dict[str, Any], path: Path) -> dict[str, Any]:
    """What a checkpoint says of the run that wrote it, as far as "the same experiment" goes:
    the module's class and hyperparameters, a YAML run's data class, the precision, the number
    of processes and whether it is a sharded folder. Small entries only (no tensor is read)."""
    experiment = state.get("experiment")
    data = experiment.get("data") if isinstance(experiment, dict) else None
    precision = state.get("precision")
    rng = state.get("rng")
    sharded = state.get("sharded")
    world = sharded.get("world_size") if isinstance(sharded, dict) else len(rng) if isinstance(rng, list) else None
    return {
        "model class": state.get("module_class"),
        "hyperparameters": _as_built(state.get("hparams"), state.get("tuned_hparams")),
        "data class": data.get("class_path") if isinstance(data, dict) else None,
        "precision": precision.get("name") if isinstance(precision, dict) else None,
        "processes": world,
        "checkpoint kind": "sharded folder" if path.is_dir() else "single file",
    }


def _as_built(hparams: Any, tuned: Any) -> Any:
    """The hyperparameters the module was built with: a learning-rate sweep's suggestion
    (`tuned_hparams` holds what it replaced) does not make the run another experiment."""
    if not isinstance(hparams, dict) or not isinstance(tuned, dict) or not tuned:
        return hparams
    return {**hparams, **{k: v for k, v in tuned.items() if k in hparams}}


def checkpoints_in(folder: str | os.PathLike[str]) -> list[Path]:
    """Every checkpoint under `folder` (files and FSDP folders named `*.ckpt`), at any depth."""
    base = Path(folder)
    if not base.is_dir():
        return []
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(base):
        here = Path(directory)
        keep = []
        for name in sorted(subdirectories):
            if name.startswith("."):
                continue
            if name.endswith(_SUFFIX) and (here / name / STATE_FILE).is_file():
                found.append(here / name)  # a sharded checkpoint: a candidate, not a folder to search
            else:
                keep.append(name)
        subdirectories[:] = keep
        found.extend(here / name for name in sorted(files) if name.endswith(_SUFFIX) and not name.startswith("."))
    return found


def written_at(path: Path) -> int:
    """When a checkpoint was written (ns): a file's modification time; a sharded folder's
    state file's, which is written last. 0 when it can't be read."""
    where = path / STATE_FILE if path.is_dir() else path
    try:
        return where.stat().st_mtime_ns
    except OSError:
        return 0


def recorded_step(path: str | os.PathLike[str]) -> int | None:
    """The global step a checkpoint records, read without loading its tensors; None when it
    can't be read (damaged) or is not a resumable checkpoint of this trainer."""
    candidate = _peek(Candidate(Path(path), 0))
    return candidate.step if candidate.problem is None and candidate.resumable else None


def _peek(candidate: Candidate) -> Candidate:
    """Read the candidate's index and small entries (tensors stay memory-mapped, unread)."""
    path = candidate.path
    try:
        if path.is_dir():
            state = load_checkpoint(path / STATE_FILE)  # small: the tensors are in the shards
        else:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except CheckpointError as error:
        candidate.problem = str(error)
        return candidate
    except Exception as error:  # noqa: BLE001 - any failure to read it means a damaged file
        candidate.problem = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        return candidate
    if not isinstance(state, dict) or state.get("format") != FORMAT or state.get("weights_only") is True:
        candidate.resumable = False
        return candidate
    loop = state.get("loop")
    step = loop.get("global_step") if isinstance(loop, dict) else None
    candidate.step = step if isinstance(step, int) else None
    candidate.run = run_facts(state, path)
    return candidate


def peek(path: Path) -> Candidate:
    """A checkpoint's step and `run_facts`, read cheaply; `problem` set when it is damaged."""
    return _peek(Candidate(path, written_at(path)))


def _load(path: Path) -> dict[str, Any]:
    state = read_sharded(path) if path.is_dir() else load_checkpoint(path)
    check_layout(state)
    return state


def load_newest(paths: list[Path], where: str) -> dict[str, Any] | None:
    """Load the newest complete checkpoint of `paths` (see the module); None when there is
    none at all. `where` names the run for messages.

    Raises:
        CheckpointError: there are checkpoints, but none of them loads (each one named).
    """
    candidates = [_peek(Candidate(path, written_at(path))) for path in paths]
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
