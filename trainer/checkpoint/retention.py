"""`Trainer(keep_last_checkpoints=k)`: the newest k last-style checkpoints of a run.

Before `last.ckpt` is replaced by a save at a later step, the current one is kept as
`last-step=N.ckpt` (N: the optimizer step it records): a hard link, so `last.ckpt` is never
absent and nothing is copied (where links are not supported, and for FSDP's folders, it is
renamed, and `ckpt_path="last"` finds it under that name until the new `last.ckpt` is
complete). After the new file is complete, the `last-step=*.ckpt` beyond the k - 1 newest
(written last; the step breaks ties) are removed. A `last.ckpt` that can't be read (damaged) is not kept; a save at the
step it already records replaces it in place. k = 1 (the default) keeps `last.ckpt` alone.
In an object store (`s3://...`) the kept copy is a server-side copy (no links there).

The checkpoint the run resumed from (`protect`) is never removed, whatever its rank: a run that
resumed from `last-step=N.ckpt` (its `last.ckpt` was damaged) keeps that file.

Example:
    >>> kept_name(1200)
    'last-step=1200.ckpt'
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

from trainer.checkpoint.latest import recorded_step, written_at
from trainer.checkpoint.storage import Location, RemotePath, identity, remove

__all__ = ["kept_name", "keep_previous", "prune_kept"]

_KEPT = re.compile(r"last-step=(\d+)\.ckpt")


def kept_name(step: int) -> str:
    return f"last-step={step}.ckpt"


def keep_previous(last: Location, keep: int, step: int) -> Location | None:
    """Before a save of `last` at optimizer step `step`: keep the current `last` under its
    step's name when `keep` > 1 and it records an earlier step. Returns the kept path."""
    if keep <= 1 or not last.exists():
        return None
    previous = recorded_step(last)
    if previous is None or previous == step:
        return None  # damaged, foreign, or the same point of the run: replaced in place
    kept = last.with_name(kept_name(previous))
    remove(kept)
    if isinstance(last, RemotePath) and isinstance(kept, RemotePath):
        last.copy_to(kept)
        return kept
    assert isinstance(last, Path) and isinstance(kept, Path)
    if last.is_dir():
        os.replace(last, kept)
        return kept
    try:
        os.link(last, kept)
    except OSError:  # no hard links on this filesystem
        os.replace(last, kept)
    return kept


def prune_kept(last: Location, keep: int, protect: Collection[str] = ()) -> list[Location]:
    """After `last` is complete: remove the `last-step=*.ckpt` beside it beyond the `keep` - 1
    newest (written last, as `ckpt_path="last"` ranks them), but never one named in `protect`
    (the checkpoint the run resumed from). Returns what was removed."""
    if not isinstance(last, RemotePath) and not last.parent.is_dir():
        return []
    kept = sorted(
        ((written_at(p), int(m.group(1)), p) for p in last.parent.iterdir() if (m := _KEPT.fullmatch(p.name))),
        key=lambda item: item[:2], reverse=True,
    )
    spared = {identity(path) for path in protect}
    removed = [path for _, _, path in kept[max(keep - 1, 0):] if identity(path) not in spared]
    for path in removed:
        remove(path)
    return removed
