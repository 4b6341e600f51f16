"""A run's checkpoints as candidates for `ckpt_path="last"`: found under a folder (files and FSDP's
folders named `*.ckpt`, temporaries never), dated, and peeked at cheaply (the archive's index,
memory-mapped, not its tensors) for the step they record and the run that wrote them.

Example:
    >>> import tempfile
    >>> checkpoints_in(tempfile.mkdtemp())
    []
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint.format import FORMAT, CheckpointError, load_checkpoint
from trainer.checkpoint.run_facts import run_facts
from trainer.checkpoint.sharded import STATE_FILE
from trainer.checkpoint.storage import Location, RemotePath, location

__all__ = ["Candidate", "checkpoints_in", "peek", "recorded_step", "run_folder_of", "written_at"]

_SUFFIX = ".ckpt"


@dataclass
class Candidate:
    """A checkpoint a run wrote: where, when, and (once peeked) its step or why it is unusable."""

    path: Location
    mtime_ns: int
    step: int | None = None
    problem: str | None = None  # damaged: why; None: readable so far
    resumable: bool = True  # False: weights only, or not this trainer's format (skipped quietly)
    run: dict[str, Any] | None = None  # what the run was (`run_facts`), once peeked


def checkpoints_in(folder: str | os.PathLike[str] | RemotePath) -> list[Location]:
    """Every checkpoint under `folder` (files and FSDP folders named `*.ckpt`), at any depth
    (a URL: every object below that prefix, from one listing)."""
    base = location(folder)
    if isinstance(base, RemotePath):
        start = len(base.key) + 1
        return [p for p in base.walk_files() if p.name.endswith(_SUFFIX)
                and not any(part.startswith(".") for part in p.key[start:].split("/"))]
    if not base.is_dir():
        return []
    found: list[Location] = []
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


def run_folder_of(checkpoint: str | os.PathLike[str] | RemotePath, root: str | os.PathLike[str] | RemotePath) -> Location:
    """The run folder a checkpoint belongs to: its `last.ckpt` sits in it, ModelCheckpoint's
    files in its `checkpoints/` (whatever the folder layout above it)."""
    folder = location(checkpoint).parent
    return folder.parent if folder.name == "checkpoints" and folder != location(root) else folder


def written_at(path: Location) -> int:
    """When a checkpoint was written (ns): a file's modification time; a sharded folder's
    state file's, which is written last. 0 when it can't be read."""
    where = path / STATE_FILE if path.is_dir() else path
    try:
        return where.stat().st_mtime_ns
    except OSError:
        return 0


def recorded_step(path: str | os.PathLike[str] | RemotePath) -> int | None:
    """The global step a checkpoint records, read without loading its tensors; None when it
    can't be read (damaged) or is not a resumable checkpoint of this trainer."""
    candidate = _peek(Candidate(location(path), 0), facts=False)
    return candidate.step if candidate.problem is None and candidate.resumable else None


def _peek(candidate: Candidate, facts: bool = True) -> Candidate:
    """Read the candidate's index and small entries (tensors stay memory-mapped, unread).
    Without `facts` (its step and kind are enough), an object in S3 is not read: its metadata
    says them (a damaged one is found when it is loaded)."""
    path = candidate.path
    hints = path.hints() if not facts and isinstance(path, RemotePath) else None
    if hints is not None:
        candidate.step, candidate.resumable = hints
        return candidate
    try:
        if path.is_dir():
            state = load_checkpoint(path / STATE_FILE)  # small: the tensors are in the shards
        elif isinstance(path, RemotePath):  # copied here: an object can't be memory-mapped
            with path.local_copy() as local:
                state = torch.load(local, map_location="cpu", weights_only=True, mmap=True)
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


def peek(path: Location) -> Candidate:
    """A checkpoint's step and `run_facts`, read cheaply; `problem` set when it is damaged."""
    return _peek(Candidate(path, written_at(path)))
