"""Sharded checkpoints (FSDP): a folder that every rank writes its shards into with
torch.distributed.checkpoint (DCP), with the guarantees of the single file.

Layout of `NAME.ckpt/`:

- `.metadata`, `__R_0.distcp`: DCP's index and each rank's shards of
  `{"module": state_dict, "optimizers": {"0": optimizer state by parameter name}}`;
- `trainer_state.ckpt`: everything else (loop, schedulers, GradScaler, every rank's random
  and data-order state, callbacks, config) in the single-file format, written last.

Atomic: the ranks write into `.NAME.ckpt.PID.tmp/`; after DCP's own final barrier rank 0
adds `trainer_state.ckpt` and swaps the folder into place (the previous one is renamed
aside, then removed). A kill at any moment leaves the previous checkpoint whole: either at
its name, or, between the two renames, aside as `.NAME.ckpt.PID.old`, which loading and
the next save put back.

In a bucket (`s3://...`) there is no rename: sharded_remote.py writes a version folder and
commits it with an object instead.

Never runs code: DCP reads its index with `pickle` and non-tensor entries with
`torch.load(weights_only=False)`; here both go through restricted readers that accept only
DCP's own metadata classes and plain data.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch

from trainer.checkpoint.format import (CheckpointError, _alive, _fsync_directory, load_checkpoint, other_kind_at,
                                       remove_checkpoint, save_atomic)
from trainer.checkpoint.dcp_index import IndexUnpickler
from trainer.checkpoint.host import ShardHost, module_of
from trainer.checkpoint.storage import Location, RemotePath, is_remote
from trainer.lightning.checkpoint import sharded_lightning_keys

__all__ = ["STATE_FILE", "is_sharded", "save_sharded", "read_sharded", "restore_sharded", "restore_sharded_optimizers",
           "export_weights"]

STATE_FILE = "trainer_state.ckpt"
_DCP_INDEX = ".metadata"


def is_sharded(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a sharded checkpoint folder (or one set aside by a cut-short swap)."""
    return _readable(Path(path)) is not None


# ------------------------------------------------------------------------------ writing
def save_sharded(state: dict[str, Any], target: Location, trainer: ShardHost, *,
                 process_group: Any = None) -> Callable[[], None] | None:
    """Every rank: write `state` (from `collect_state`) as the folder `target`.

    With `process_group` (a group of its own, for the writes' collectives) the shards are
    copied off the training path and written by `dcp.async_save` in the background; the
    returned function (for a background thread) waits for them and completes the folder
    (rank 0: the state file, then the swap). Without, the folder is complete on return.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    strategy, module = trainer.strategy, module_of(trainer)
    tensors: dict[str, Any] = {"module": state["module"], "optimizers": {}}
    meta = dict(state, module={}, sharded={"world_size": strategy.world_size})  # tensors: in the shards
    entries = []
    optimizers = trainer.optimizers.optimizers if trainer.optimizers is not None and "optimizers" in state else []
    for index, (optimizer, entry) in enumerate(zip(optimizers, state.get("optimizers", []))):
        if optimizer.state:  # by parameter name, so DCP can reshard it onto another world size
            tensors["optimizers"][str(index)] = get_optimizer_state_dict(module, optimizer)
            entries.append({"class": entry["class"], "state": None, "sharded": True})
        else:  # nothing stepped yet: DCP's templates would invent a step, so keep it as is
            entries.append(entry)
    if "optimizers" in state:
        meta["optimizers"] = entries
    sharded_lightning_keys(meta)  # Lightning's keys of what moved into the shards
    if isinstance(target, RemotePath):  # a bucket: a version folder, committed by an object (sharded_remote.py)
        from trainer.checkpoint.sharded_remote import save_to_bucket

        return save_to_bucket(tensors, meta, target, strategy, process_group)
    token = strategy.broadcast_object(os.getpid())
    temporary = target.with_name(f".{target.name}.{token}.tmp")
    prepared: Exception | None = None
    if strategy.is_global_zero:
        try:
            if target.is_file():
                raise other_kind_at(target, sharded=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            _tidy(target)
            shutil.rmtree(temporary, ignore_errors=True)
            temporary.mkdir()
        except (OSError, CheckpointError) as error:
            prepared = error
    if not strategy.all_agree(prepared is None):  # also the barrier before any rank writes
        if prepared is not None:
            raise prepared
        raise RuntimeError(f"Checkpoint {str(target)!r}: rank 0 could not make the folder (see its error).")
    writer = dcp.FileSystemWriter(temporary, sync_files=True)
    rank_zero = strategy.is_global_zero
    if process_group is not None:
        from trainer.checkpoint.background import stage

        staged = stage(meta)  # the rest of the state, off the training path too
        response = dcp.async_save(tensors, storage_writer=writer, process_group=process_group)  # stages the shards
        future: Any = getattr(response, "upload_completion", response)  # a Future, or (a stager's) AsyncSaveResponse

        def complete() -> None:
            try:
                future.result()  # every rank's shards are written once rank 0's save returns
                if rank_zero:
                    _complete(staged, temporary, target)
            except BaseException:
                if rank_zero:
                    shutil.rmtree(temporary, ignore_errors=True)
                raise

        return complete
    try:
        dcp.save(tensors, storage_writer=writer)  # collective; ends after rank 0 wrote the index
        if rank_zero:
            _complete(meta, temporary, target)
    except BaseException:
        if rank_zero:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    return None


def _complete(meta: dict[str, Any], temporary: Path, target: Path) -> None:
    """Rank 0, once every rank's shards are in `temporary`: the state file, then the swap."""
    save_atomic(meta, temporary / STATE_FILE)
    _fsync_directory(temporary)
    _swap(temporary, target)


def _swap(temporary: Path, target: Path) -> None:
    """Put the complete folder `temporary` at `target`; the old one is set aside, then removed."""
    if not target.exists() and not target.is_symlink():
        os.replace(temporary, target)
    else:
        aside = target.with_name(f".{target.name}.{os.getpid()}.old")
        remove_checkpoint(aside)
        os.replace(target, aside)
        os.replace(temporary, target)
        _fsync_directory(target.parent)
        remove_checkpoint(aside)
    _fsync_directory(target.parent)


def _tidy(target: Path) -> None:
    """Rank 0 before a save: put back a checkpoint a cut-short swap set aside, and remove
    temporaries of saves whose process is gone."""
    pattern = re.compile(re.escape(f".{target.name}.") + r"(\d+)\.(tmp|old)")
    for candidate in target.parent.iterdir():
        match = pattern.fullmatch(candidate.name)
        if match is None or _alive(int(match.group(1))):
            continue
        if match.group(2) == "old" and not target.exists() and (candidate / STATE_FILE).is_file():
            os.replace(candidate, target)
        else:
            remove_checkpoint(candidate)


# ------------------------------------------------------------------------------ reading
def _readable(folder: Path) -> Path | None:
    """`folder`, or the complete copy a cut-short swap set aside for it, or None."""
    if folder.is_dir():
        return folder
    if not folder.parent.is_dir():
        return None
    pattern = re.compile(re.escape(f".{folder.name}.") + r"\d+\.old")
    for candidate in sorted(folder.parent.iterdir()):
        if pattern.fullmatch(candidate.name) and (candidate / STATE_FILE).is_file():
            return candidate
    return None


def read_sharded(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The trainer state of a sharded checkpoint, checked; its tensors load in `restore_sharded`."""
    named = Path(path)
    folder = _readable(named)
    if folder is None:
        raise CheckpointError(f"Checkpoint {str(named)!r} does not exist. Expected a checkpoint folder written by an FSDP run.")
    missing = [name for name in (STATE_FILE, _DCP_INDEX) if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(
            f"Checkpoint {str(named)!r} is a folder without {' and '.join(missing)}, so it is not a complete "
            "sharded checkpoint (a save cut short never leaves one at the final name). Expected a folder "
            "written by Trainer.save_checkpoint under strategy='fsdp'."
        )
    state = load_checkpoint(folder / STATE_FILE)
    if not isinstance(state.get("sharded"), dict):
        raise CheckpointError(f"Checkpoint {str(named)!r}: its {STATE_FILE} does not describe sharded tensors.")
    state["_path"] = str(named)
    state["_shards"] = _read_index(folder, str(named))  # in memory only
    state["_folder"] = str(folder)
    return state


def _read_index(folder: Path, name: str) -> Any:
    try:
        return _SafeReader(folder).read_metadata()
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"Checkpoint {name!r}: its {_DCP_INDEX} holds objects other than DCP's index ({error}), so it was "
            "refused without running any of it. Only folders written by Trainer.save_checkpoint load."
        ) from None
    except Exception as error:  # noqa: BLE001 - any failure to parse means a damaged index
        raise CheckpointError(f"Checkpoint {name!r}: its {_DCP_INDEX} can't be read ({type(error).__name__}: {error}).") from None


def _saved_tensors(shards: Any, prefix: str) -> dict[str, tuple[int, ...]]:
    """Entry name -> global shape of the tensors saved under `prefix` (e.g. "module.")."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    return {
        key[len(prefix):]: tuple(entry.size)
        for key, entry in shards.state_dict_metadata.items()
        if key.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
    }


def _check_fits(module: torch.nn.Module, checkpoint: dict[str, Any], own: dict[str, Any]) -> None:
    saved = _saved_tensors(checkpoint["_shards"], "module.")
    own_shapes = {k: tuple(v.shape) for k, v in own.items() if isinstance(v, torch.Tensor)}
    missing = sorted(set(own_shapes) - set(saved))
    unexpected = sorted(set(saved) - set(own_shapes))
    misshaped = sorted(
        f"{k}: checkpoint {saved[k]} vs model {own_shapes[k]}" for k in set(saved) & set(own_shapes) if saved[k] != own_shapes[k]
    )
    if missing or unexpected or misshaped:
        parts = [f"{label}: {', '.join(items)}" for label, items in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped)) if items]
        raise CheckpointError(
            f"Checkpoint {checkpoint['_path']!r} does not fit {type(module).__name__} (it was saved from "
            f"{checkpoint.get('module_class', 'an unknown class')}). " + "; ".join(parts) + "."
        )


def restore_sharded(module: torch.nn.Module, optimizers: list[torch.optim.Optimizer] | None, checkpoint: dict[str, Any]) -> None:
    """Load the weights (and, given `optimizers`, their states) of a sharded checkpoint into
    this run's model, sharded or not, on any number of processes (DCP reshards)."""
    own = module.state_dict()
    _check_fits(module, checkpoint, own)
    _load_shards(checkpoint, {"module": own}, partial=True)
    module.load_state_dict(own)
    if optimizers:
        restore_sharded_optimizers(module, optimizers, checkpoint)


def restore_sharded_optimizers(module: torch.nn.Module, optimizers: list[torch.optim.Optimizer], checkpoint: dict[str, Any]) -> None:
    """Load the optimizer states of a sharded checkpoint (as many, of the same classes: the
    caller checked) into this run's optimizers of `module`'s parameters."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    saved_entries = checkpoint.get("optimizers") or []
    wanted = {
        str(index): get_optimizer_state_dict(module, optimizer)
        for index, optimizer in enumerate(optimizers)
        if saved_entries[index].get("sharded")
    }
    if wanted:
        _load_shards(checkpoint, {"optimizers": wanted}, partial=False)
    for index, optimizer in enumerate(optimizers):
        entry = saved_entries[index]
        if entry.get("sharded"):
            set_optimizer_state_dict(module, optimizer, wanted[str(index)])
        else:
            optimizer.load_state_dict(entry["state"])


def _load_shards(checkpoint: dict[str, Any], wanted: dict[str, Any], *, partial: bool) -> None:
    """DCP-load the entries of `wanted` (in place) from the checkpoint's folder; `partial`:
    the folder may hold more than is asked for."""
    folder = checkpoint["_folder"]
    try:
        _dcp_load(wanted, _reader_of(folder), _SafePlanner(allow_partial_load=partial), no_dist=not _distributed())
    except Exception as error:  # noqa: BLE001 - named, with the folder
        raise CheckpointError(f"Checkpoint {checkpoint['_path']!r}: its shards could not be loaded ({type(error).__name__}: {error}).") from None


def _reader_of(folder: str | Path | RemotePath) -> Any:
    """The safe DCP reader of a local folder, or of a version folder in a bucket."""
    if isinstance(folder, RemotePath):
        from trainer.checkpoint.sharded_remote import safe_reader

        return safe_reader(folder)
    return _SafeReader(Path(folder))


def _distributed() -> bool:
    from torch import distributed as dist

    return dist.is_available() and dist.is_initialized()


def export_weights(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Location:
    """Write the model weights of a checkpoint (a sharded folder or a single file) as one
    ordinary file: `{name: tensor}`, loadable with `torch.load(path, weights_only=True)` and
    `model.load_state_dict(...)` on a machine without torch.distributed.

    Example:
        >>> export_weights("runs/fsdp/checkpoints/last.ckpt", "weights.pt")  # doctest: +SKIP
    """
    checkpoint: dict[str, Any] | None = None
    if is_remote(source):  # an object in a bucket: a single file, or the commit of a sharded version folder
        from trainer.checkpoint.sharded_remote import attach_shards
        from trainer.checkpoint.storage import location

        where = location(source)
        assert isinstance(where, RemotePath)
        checkpoint = attach_shards(load_checkpoint(where), where)
    elif _readable(Path(source)) is not None:
        checkpoint = read_sharded(source)
    if checkpoint is None or "_shards" not in checkpoint:
        weights = (checkpoint if checkpoint is not None else load_checkpoint(source))["module"]
    else:
        shards = checkpoint["_shards"]
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        weights = {}
        for key, entry in shards.state_dict_metadata.items():
            if key.startswith("module.") and isinstance(entry, TensorStorageMetadata):
                weights[key[len("module."):]] = torch.empty(entry.size, dtype=entry.properties.dtype)
        _dcp_load({"module": weights}, _reader_of(checkpoint["_folder"]), _SafePlanner(allow_partial_load=True), no_dist=True)
    return save_atomic({k: v.detach().clone().contiguous() for k, v in weights.items()}, target)


def _dcp_load(state: dict[str, Any], reader: Any, planner: Any, no_dist: bool) -> None:
    """`dcp.load`; in one process (`no_dist`, asked for on purpose) without torch's warning that
    torch.distributed is "disabled, unavailable or uninitialized" (only that warning is hidden)."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        if no_dist:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        dcp.load(state, storage_reader=reader, planner=planner, no_dist=no_dist)


# ------------------------------------------------------------------- safe DCP readers
def _reader_class() -> Any:
    from torch.distributed.checkpoint import FileSystemReader

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            from torch.distributed.checkpoint.metadata import StorageMeta

            with open(Path(self.path) / _DCP_INDEX, "rb") as stream:
                metadata = IndexUnpickler(stream).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader


def _SafeReader(folder: Path) -> Any:  # noqa: N802 - reads like the class it returns
    return _reader_class()(folder)


def _SafePlanner(**kwargs: Any) -> Any:  # noqa: N802
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        """Non-tensor entries load with weights_only=True (DCP's default would run pickled code)."""

        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            loaded = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                from torch.distributed.checkpoint._traverse import set_element

                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return SafePlanner(**kwargs)
