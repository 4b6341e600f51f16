"""A run folder checked before fit writes in it: its last.ckpt is of the kind this run writes (a
single file, or FSDP's sharded folder), and a named run that starts over is warned that it
replaces that run's checkpoints.
"""

from __future__ import annotations

import warnings

from trainer.checkpoint.latest import recorded_step, user_stacklevel
from trainer.checkpoint.storage import Location, RemotePath

__all__ = ["other_kind_in", "warn_if_restarting"]


def other_kind_in(folder: Location, sharded: bool) -> str | None:
    """Why a run writing sharded folders (`sharded`) or single files can't go on in `folder`:
    its last.ckpt is of the other kind, and the first save would replace it. None: it can."""
    last = folder / "last.ckpt"
    if isinstance(last, RemotePath):  # an object: the commit of a sharded version folder or a single file (S3 knows)
        if not last.is_file() or last.protocol not in ("s3", "s3a") or (last.shards_folder() is not None) == sharded:
            return None
        there, here = ("a sharded checkpoint", "single files") if not sharded else ("a single file", "sharded checkpoints")
    elif not ((last.is_dir() and not sharded) or (last.is_file() and sharded)):
        return None
    else:
        there, here = ("a sharded folder (strategy='fsdp')", "single files") if last.is_dir() else (
            "a single file", "sharded folders (strategy='fsdp')")
    return (
        f"Run folder {str(folder)!r} holds last.ckpt as {there}, and this run writes {here}: its first save would "
        "replace that run's checkpoint with one of another kind. Nothing was trained. Expected the strategy and "
        "number of processes that run used (to continue it), or another run folder (Trainer(run_name=...), "
        "another root_dir)."
    )


def warn_if_restarting(run_dir: Location) -> None:
    """A named run's folder that already holds last.ckpt, and a fit that starts from the
    beginning: say that it overwrites that run, and how to continue it instead."""
    last = run_dir / "last.ckpt"
    if not last.exists():
        return
    step = recorded_step(last)
    warnings.warn(
        f"Run folder {str(run_dir)!r} already holds last.ckpt{f' (optimizer step {step})' if step is not None else ''} "
        "of an earlier run, and this fit starts from the beginning (no ckpt_path): that run's checkpoints will be "
        "replaced and its curves continue in the same folder. Pass ckpt_path='last' to continue it, or another "
        "run_name for a new run.",
        stacklevel=user_stacklevel(),
    )
