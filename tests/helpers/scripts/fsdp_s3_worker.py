"""FSDP's sharded checkpoints in a bucket, under `torchrun --nproc_per_node=2` (Gloo, CPU).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 fsdp_s3_worker.py ROOT_URL OUT_DIR
(the S3 server's endpoint and credentials in the environment). A run never interrupted, and the
same run stopped by SIGTERM mid-epoch then resumed with ckpt_path="last" from the bucket, with
synchronous and background (`async_checkpointing=True`) saves; every commit of the background
saves records the thread it ran on and what its version folder held then. Before the sync resume,
a newer save of last.ckpt is cut short
before its commit, and a newer committed checkpoint loses a shard file: "last" must pass both.
Each rank writes OUT_DIR/rank{r}.pt for tests/checkpoint/test_s3_sharded.py.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import make_data
from tests.helpers.scripts.fsdp_worker import RANK, Terminate, full, resume_model, trainer
from trainer import Trainer
from trainer.checkpoint import load_checkpoint, sharded_remote
from trainer.distributed import FSDP


def fsdp_trainer(root: str | None, name: str, **kwargs: Any) -> Trainer:
    options: dict[str, Any] = dict(enable_checkpointing=root is not None, root_dir=root or ".")
    return trainer(FSDP(shard_modules=["Linear"]), "amp", 2, 0.5, max_epochs=3, seed=7, run_name=name,
                   keep_last_checkpoints=2, **options, **kwargs)


def listing(folder: Any) -> list[str]:
    """Every object below the run's folder (rank 0), relative to it."""
    found = folder.walk_files()
    return sorted(p.key[len(folder.key) + 1:] for p in found)


def cut_short(t: Trainer, target: Any) -> None:
    """A save of `target` whose shards are all written but whose commit never happens (a kill)."""
    original = sharded_remote.save_atomic

    def no_commit(state: Any, path: Any) -> Any:
        raise OSError("cut short before the commit")

    sharded_remote.save_atomic = no_commit  # type: ignore[assignment]
    try:
        t.save_checkpoint(target)
    except (OSError, RuntimeError):  # rank 0's error; the other rank's "rank 0 failed"
        pass
    finally:
        sharded_remote.save_atomic = original  # type: ignore[assignment]
    t.strategy.barrier()


def recording_commits(commits: list[tuple[str, str, list[str]]]) -> None:
    """Rank 0: each commit of a sharded save (the object naming its version folder) appends the
    thread it ran on, the object's name and the version folder's files at that moment."""
    original = sharded_remote.save_atomic

    def commit(state: Any, path: Any) -> Any:
        folder = path.parent / state["sharded"]["folder"]
        commits.append((threading.current_thread().name, path.name, sorted(entry.name for entry in folder.iterdir())))
        return original(state, path)

    sharded_remote.save_atomic = commit  # type: ignore[assignment]


def main() -> None:
    root, out = sys.argv[1], Path(sys.argv[2])
    data = make_data(40)
    loader = lambda: DataLoader(data, batch_size=4, shuffle=True)  # noqa: E731
    results: dict[str, Any] = {}
    whole = resume_model()
    fsdp_trainer(None, "whole").fit(whole, loader())
    for mode, asynchronous in (("sync", False), ("async", True)):
        results[f"{mode}/whole"] = full(whole)
        if asynchronous and RANK == 0:
            recording_commits(results.setdefault("async/commits", []))
        cut = resume_model()
        t = fsdp_trainer(root, mode, callbacks=[Terminate(at=4)], async_checkpointing=asynchronous)
        t.fit(cut, loader())
        results[f"{mode}/stopped_at"] = t.global_step
        folder = t._run.checkpoints.checkpoint_dir  # type: ignore[attr-defined]
        results[f"{mode}/folder"] = str(folder)
        results[f"{mode}/at_stop"] = listing(folder) if RANK == 0 else None
        results[f"{mode}/committed_step"] = load_checkpoint(folder / "last.ckpt")["global_step"]  # fit waited for it
        results[f"{mode}/cut"] = full(cut)
        if RANK == 0:  # one plain file of the whole weights, from the bucket's sharded checkpoint
            from trainer.checkpoint import export_weights

            export_weights(folder / "last.ckpt", out / f"{mode}-exported.pt")
            results[f"{mode}/exported"] = torch.load(out / f"{mode}-exported.pt", weights_only=True)
        if mode == "sync":
            cut_short(t, folder / "last.ckpt")  # an uncommitted newest version of last.ckpt
            newer = folder / "checkpoints" / "newer.ckpt"
            t.save_checkpoint(newer)  # committed, newest; then one of its shard files is lost
            if RANK == 0:
                version = newer.shards_folder()
                results["damaged_version"] = version
                (newer.parent / version / "__1_0.distcp").unlink()
            t.strategy.barrier()
            results["before_resume"] = listing(folder) if RANK == 0 else None
        resumed = resume_model()
        t2 = fsdp_trainer(root, mode, async_checkpointing=asynchronous)
        t2.fit(resumed, loader(), ckpt_path="last")
        results[f"{mode}/resumed"] = full(resumed)
        results[f"{mode}/resumed_from"] = str(t2.ckpt_path)
        results[f"{mode}/resumed_step"] = t2.global_step
        results[f"{mode}/at_end"] = listing(folder) if RANK == 0 else None
    torch.save(results, out / f"rank{RANK}.pt")


if __name__ == "__main__":
    main()
