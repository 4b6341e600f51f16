"""FSDP's sharded checkpoints in an object store (`s3://bucket/run/last.ckpt`), written and read
through DCP's fsspec writer and reader.

An object store has no rename, so the local folder's swap (sharded.py) can't make a save atomic.
Instead every save of `NAME` goes to a fresh version folder beside it, and a small object commits it:

- `NAME.d/<step>-<nonce>/`: DCP's `.metadata` and every rank's `__R_0.distcp`, written by every rank;
- `NAME`: written by rank 0 once every rank's shards are in (after DCP's own final collective), as
  one upload committed last (storage.py): the trainer state (the single-file format, with its
  CRC-32), whose `sharded` entry names the version folder and the CRC-32 of its `.metadata`.

With `async_checkpointing=True` the same steps run in the background (`dcp.async_save` over the
writes' own Gloo group, then rank 0's commit in the writer's thread); the next save and the end
of fit wait for them.

Readers follow `NAME` only, so a save killed at any moment leaves `NAME` as it was (the previous
version, whole) and an uncommitted version folder nobody reads; the next successful save of `NAME`
removes its other versions (those of the kept `last-step=N.ckpt` copies of `last.ckpt` stay: a
copy of the object names the same folder). A version folder left by a removed checkpoint object
(top-k, retention) stays until the next save of that name. Reading checks the `.metadata`
against the CRC-32 the commit recorded and that every shard file it lists is there, so a version
whose files were lost is found before any tensor is loaded (`ckpt_path="last"` then falls back
to an older checkpoint).

Never runs code: the index is unpickled with sharded.py's restricted unpickler, and non-tensor
entries load with `torch.load(weights_only=True)`, as for a local folder.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import uuid
import zlib
from collections.abc import Callable
from typing import Any

from trainer.checkpoint.format import CheckpointError, save_atomic
from trainer.checkpoint.storage import RemotePath, explain

__all__ = ["attach_shards", "collect_versions", "save_to_bucket", "safe_reader"]

_INDEX = ".metadata"
_KEPT = re.compile(r"last-step=(\d+)\.ckpt")  # retention.py's kept copies of last.ckpt


def save_to_bucket(tensors: dict[str, Any], meta: dict[str, Any], target: RemotePath, strategy: Any,
                   process_group: Any = None) -> Callable[[], None] | None:
    """Every rank: write `tensors` (DCP) into a fresh version folder beside `target`, then (rank 0)
    commit it by writing `meta` at `target`; committed on return.

    With `process_group` (a group of its own, for the writes' collectives: `async_checkpointing`)
    the shards are copied off the training path and uploaded by `dcp.async_save` in the
    background; the returned function (for a background thread, every rank) waits for them and
    then, on rank 0, commits: the same steps in the same order, so a save cut short at any moment
    leaves `target` at its previous version."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    loop = meta.get("loop")
    step = loop.get("global_step", 0) if isinstance(loop, dict) else 0
    version = strategy.broadcast_object(f"{target.name}.d/{step}-{uuid.uuid4().hex[:12]}")
    folder = target.parent / version
    writer = FsspecWriter(folder.url, sync_files=False, **target.options)
    rank_zero = strategy.is_global_zero

    def commit(state: dict[str, Any]) -> None:
        index = _read_bytes(folder / _INDEX)
        state["sharded"] = {**state["sharded"], "folder": version, "index_crc32": zlib.crc32(index)}
        save_atomic(state, target)  # the commit: until here readers see the previous version
        collect_versions(target, keep=version)

    if process_group is None:
        dcp.save(tensors, storage_writer=writer)  # collective; ends after rank 0 wrote the index
        if rank_zero:
            commit(meta)
        return None
    from trainer.checkpoint.background import stage

    staged = stage(meta)  # the rest of the state, off the training path too
    response = dcp.async_save(tensors, storage_writer=writer, process_group=process_group)  # stages the shards
    future: Any = getattr(response, "upload_completion", response)  # a Future, or (a stager's) AsyncSaveResponse

    def complete() -> None:
        future.result()  # DCP's final collective: rank 0 wrote the index after every rank's shards were in
        if rank_zero:
            commit(staged)

    return complete


def _read_bytes(where: RemotePath) -> bytes:
    try:
        return bytes(where.fs.cat_file(where.key))
    except FileNotFoundError:
        raise
    except Exception as error:  # noqa: BLE001
        raise explain(where, error) from None


def collect_versions(target: RemotePath, keep: str) -> list[RemotePath]:
    """Rank 0 after the commit of `target`: remove its version folders (`NAME.d/<step>-<nonce>/`)
    but `keep` (the one just committed) and those of the kept copies beside it
    (`last-step=N.ckpt` names the versions of step N): replaced versions and saves cut short.
    From one listing of each folder (no object is read). Returns what was removed."""
    removed: list[RemotePath] = []
    with contextlib.suppress(Exception):  # best effort: a leftover costs space, never correctness
        kept_steps = {match.group(1) for entry in target.parent.iterdir() if (match := _KEPT.fullmatch(entry.name))}
        for version in (target.parent / f"{target.name}.d").iterdir():
            named = f"{target.name}.d/{version.name}" == keep
            if named or (target.name == "last.ckpt" and version.name.partition("-")[0] in kept_steps):
                continue
            version.fs.rm(version.key, recursive=True)
            removed.append(version)
    return removed


def attach_shards(state: dict[str, Any], where: RemotePath) -> dict[str, Any]:
    """A commit object just loaded from `where`: when it names a version folder (a sharded
    checkpoint), its checked index and folder are added (`_shards`, `_folder`) for
    `sharded.restore_sharded`; else `state` as is."""
    sharded = state.get("sharded")
    if not isinstance(sharded, dict) or not isinstance(sharded.get("folder"), str):
        return state
    name = str(where)
    folder = where.parent / sharded["folder"]
    try:
        index = _read_bytes(folder / _INDEX)
    except FileNotFoundError:
        raise CheckpointError(f"Checkpoint {name!r}: its shards' folder {str(folder)!r} has no {_INDEX} (it was removed "
                              "or lost), so it can't be loaded.") from None
    if zlib.crc32(index) != sharded.get("index_crc32"):
        raise CheckpointError(f"Checkpoint {name!r}: the {_INDEX} of {str(folder)!r} is not the one its save recorded "
                              "(CRC-32 mismatch): damaged or replaced, so it was not loaded.")
    metadata = _unpickle_index(index, name)
    present = {entry.name for entry in folder.iterdir()}
    files = {getattr(item, "relative_path", None) for item in (metadata.storage_data or {}).values()}
    missing = sorted(str(f) for f in files if f and f not in present)
    if missing:
        raise CheckpointError(f"Checkpoint {name!r}: shard files missing from {str(folder)!r}: {', '.join(missing)}. "
                              "Expected every file its save wrote; the checkpoint was not loaded.")
    state["_shards"] = metadata
    state["_folder"] = folder
    return state


def _unpickle_index(data: bytes, name: str) -> Any:
    import io

    from trainer.checkpoint.dcp_index import IndexUnpickler

    try:
        return IndexUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"Checkpoint {name!r}: its {_INDEX} holds objects other than DCP's index ({error}), so it was refused "
            "without running any of it. Only checkpoints written by Trainer.save_checkpoint load."
        ) from None
    except Exception as error:  # noqa: BLE001 - a damaged index
        raise CheckpointError(f"Checkpoint {name!r}: its {_INDEX} can't be read ({type(error).__name__}: {error}).") from None


def safe_reader(folder: RemotePath) -> Any:
    """DCP's fsspec reader of `folder`, whose index is unpickled by the restricted unpickler."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    class SafeFsspecReader(FsspecReader):  # type: ignore[misc]
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            from torch.distributed.checkpoint.metadata import StorageMeta

            metadata = _unpickle_index(_read_bytes(folder / _INDEX), str(folder))
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeFsspecReader(folder.url, **folder.options)
