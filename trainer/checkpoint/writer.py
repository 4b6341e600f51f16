"""Writing a collected checkpoint: now or in the background, one file or FSDP's shards, with
the newest `keep` last-style checkpoints kept, and every rank told how the write went.

`CheckpointWriter.write` is what `Checkpoints.save` (io.py) calls once the state is collected:

- a single file (one process, DDP): rank 0 writes it (`save_atomic`); in the background when
  asked (`Trainer(async_checkpointing=True)` inside fit, see `trainer/checkpoint/background.py`);
- FSDP's folder: every rank writes its shards (`save_sharded`); in the background with
  `torch.distributed.checkpoint.async_save` over a Gloo group of the writes' own (made once,
  by every rank, at the first such save), rank 0 completing the folder when all are written;
- then, for a synchronous write, all ranks agree on whether it succeeded (also the barrier:
  no rank goes on before the file is complete, and a failed write on rank 0 fails every rank);
  for a background write, at the next save or when fit ends (`settle`).

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> from trainer.checkpoint import FORMAT, FORMAT_VERSION, load_checkpoint
    >>> from trainer.strategies import SingleDevice
    >>> writer, target = CheckpointWriter(), Path(tempfile.mkdtemp()) / "a.ckpt"
    >>> state = {"format": FORMAT, "format_version": FORMAT_VERSION, "w": torch.ones(2)}
    >>> writer.write(state, target, SingleDevice("cpu"), background=True)
    >>> writer.settle(SingleDevice("cpu"), enabled=True)
    >>> load_checkpoint(target)["w"]
    tensor([1., 1.])
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from trainer.checkpoint.background import BackgroundWrites, stage
from trainer.checkpoint.format import save_atomic
from trainer.checkpoint.retention import keep_previous, prune_kept
from trainer.checkpoint.storage import Location, location, remove

__all__ = ["CheckpointWriter"]

log = logging.getLogger("trainer")


class CheckpointWriter:
    """The run's checkpoint writes (see the module)."""

    def __init__(self) -> None:
        self.background = BackgroundWrites()
        self._in_flight: Location | None = None
        self._group: Any = None  # FSDP's background writes: their own process group
        self.protect: Collection[str] = ()  # the checkpoint the run resumed from: retention never removes it

    def write(self, state: dict[str, Any], target: Location, strategy: Any, *, background: bool = False,
              keep: int | None = None, shards: Any = None) -> None:
        """Write `state` (from `collect_state`) to `target` on every rank's behalf.

        Args:
            strategy: the run's strategy (rank, agreement).
            background: write a staged copy in the background (single files: rank 0;
                sharded folders: every rank its shards).
            keep: for the run's `last.ckpt`: how many last-style checkpoints to keep (1: only
                it; older `last-step=N.ckpt` beyond that are removed). None: any other save.
            shards: the Trainer, for FSDP's sharded folders (`save_sharded`); None otherwise.
        """
        step = int(state.get("loop", {}).get("global_step", 0)) if isinstance(state.get("loop"), dict) else 0
        if background and shards is None:
            if strategy.is_global_zero:
                staged = stage(state, self.background.pool)  # the only part that blocks training
                self._in_flight = target
                self.background.submit(lambda: self._write_file(staged, target, keep, step), target.name)
            return
        if background:
            self._write_shards_in_background(state, target, strategy, shards, keep, step)
            return
        failure: Exception | None = None
        if strategy.is_global_zero or shards is not None:
            try:
                if shards is not None:
                    from trainer.checkpoint.sharded import save_sharded

                    if strategy.is_global_zero and keep is not None:
                        keep_previous(target, keep, step)
                    save_sharded(state, target, shards)
                    if strategy.is_global_zero and keep is not None:
                        prune_kept(target, keep, self.protect)
                else:
                    self._write_file(state, target, keep, step)
            except Exception as error:  # noqa: BLE001 - re-raised below, after the other ranks know
                failure = error
        # Also the barrier: no rank goes on before the file is complete, and a failed write
        # on rank 0 fails every rank instead of leaving them waiting in a later collective.
        written = strategy.all_agree(failure is None)
        if failure is not None:
            raise failure
        if not written:
            raise RuntimeError(f"Checkpoint {str(target)!r} could not be written on rank 0 (see its error).")

    def _write_shards_in_background(self, state: dict[str, Any], target: Location, strategy: Any, shards: Any,
                                    keep: int | None, step: int) -> None:
        from trainer.checkpoint.sharded import save_sharded

        if self._group is None:
            from torch import distributed as dist

            timeout = getattr(strategy, "timeout", None)
            self._group = dist.new_group(backend="gloo", **({"timeout": timeout} if timeout is not None else {}))
        complete = save_sharded(state, target, shards, process_group=self._group)  # every rank; stages, returns
        rank_zero = strategy.is_global_zero

        def job() -> None:
            if rank_zero and keep is not None:
                keep_previous(target, keep, step)
            if complete is not None:
                complete()
            if rank_zero and keep is not None:
                prune_kept(target, keep, self.protect)

        self._in_flight = target
        self.background.submit(job, target.name)

    def _write_file(self, state: dict[str, Any], target: Location, keep: int | None, step: int) -> None:
        if keep is not None:
            keep_previous(target, keep, step)
        save_atomic(state, target)
        if keep is not None:
            prune_kept(target, keep, self.protect)

    def settle(self, strategy: Any, *, enabled: bool) -> None:
        """Every rank, when background writes are `enabled`: wait for the write in flight and
        agree on its outcome; raise its error (rank 0) or say rank 0 failed (the others)."""
        if not enabled:
            return
        failed_path, self._in_flight = self._in_flight, None
        error = self.background.wait()
        ok = strategy.all_agree(error is None) if strategy.world_size > 1 else error is None
        if error is not None:
            raise error
        if not ok:
            raise RuntimeError(
                f"A background checkpoint write on rank 0 failed{f' ({failed_path})' if failed_path else ''} "
                "(see its error); the previous checkpoint at that path is intact."
            )

    def remove(self, path: Location) -> None:
        """Delete a checkpoint (a file, an object or a sharded folder) once the write in flight
        is complete: the file it replaces is never deleted before the new one is on disk."""
        target = location(path)
        self.background.after_write(lambda: remove(target))

    def close(self) -> None:
        """Fit ended (also after an error): wait for the write in flight on this rank alone; a
        failure is logged (the error that ended fit, if any, is the one raised). Buffers freed."""
        failed_path, self._in_flight = self._in_flight, None
        error = self.background.wait()
        self.background.pool.clear()
        if error is not None:
            log.error("The background write of checkpoint %s failed: %s", failed_path, error)

