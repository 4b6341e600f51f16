"""Checkpoint files: atomic writes, checked loads that never execute code, the whole state.

A checkpoint is a dict of `state_dict`s and plain data with a format marker (layout in
docs/checkpoints.md; the marker, the error and the layout check in `schema.py`). `save_atomic`
writes it to a temporary file beside the target, flushes and fsyncs it, then `os.replace`s it
over the target, so a crash at any moment leaves the previous file intact; the CRC-32 of the
whole archive is stored as its zip comment (`digest.py`).
`load_checkpoint` checks that sum (a flipped byte anywhere never loads silently; files
without it, older ones or plain `torch.save` files, get every entry's CRC-32 checked), then
reads it with `torch.load(weights_only=True)`, which refuses anything but tensors and plain data.

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> from trainer.checkpoint import FORMAT, FORMAT_VERSION, load_checkpoint, save_atomic
    >>> path = Path(tempfile.mkdtemp()) / "x.ckpt"
    >>> _ = save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "w": torch.ones(2)}, path)
    >>> load_checkpoint(path)["w"]
    tensor([1., 1.])
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path
from typing import IO, Any, cast

import torch

from trainer._utils import first_line
from trainer.checkpoint.digest import _append_digest, _check_digest, _Crc32Writer, _crc32_on, _HeldTail, _stored_digest
from trainer.checkpoint.foreign import foreign_advice
from trainer.checkpoint.layout import upgrade
from trainer.checkpoint.schema import FORMAT, FORMAT_VERSION, CheckpointError, _corrupt, check_layout, plain_state
from trainer.checkpoint.storage import Location, RemotePath, is_remote, location, remove
from trainer.lightning.checkpoint import from_lightning, is_lightning, lightning_refusal

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "save_atomic",
    "load_checkpoint",
    "plain_state",
    "check_layout",
    "remove_checkpoint",
]

log = logging.getLogger("trainer")
_TMP_SUFFIX = ".tmp"
_ZIP_MAGIC = b"PK\x03\x04"


# ------------------------------------------------------------------------------ writing
def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{_TMP_SUFFIX}")


def _clear_stale_temporaries(path: Path) -> None:
    """Remove temporaries of `path` left by killed saves, never one another process is writing.

    Only names of exactly the form `_temporary_name` makes are considered (a user's
    `.NAME.notes.tmp` or another target's temporary never matches), and a temporary whose
    process is still alive is left alone (it may be mid-save).
    """
    pattern = re.compile(re.escape(f".{path.name}.") + r"(\d+)" + re.escape(_TMP_SUFFIX))
    for candidate in path.parent.iterdir():
        match = pattern.fullmatch(candidate.name)
        if match is not None and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):  # Windows: a file open for writing can't be removed
                candidate.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (our own process counts as not saving)."""
    if pid == os.getpid() or pid <= 0 or os.name == "nt":  # Windows: os.kill(pid, 0) would end it
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists but belongs to someone else, or can't tell
        return True
    return True


def save_atomic(state: dict[str, Any], path: str | os.PathLike[str] | RemotePath) -> Location:
    """Write `state` to `path` so that `path` is always either the old or the new file.

    A temporary left by a save that was killed is removed by the next save to `path`. A URL
    (`s3://...`) is written as one upload committed last (`storage.py`), with the same checksum.
    """
    if is_remote(path):
        return _save_remote(state, location(path))
    assert not isinstance(path, RemotePath)
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        raise other_kind_at(target, sharded=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale_temporaries(target)
    temporary = _temporary_name(target)
    writer: _Crc32Writer | None = None
    try:
        with open(temporary, "w+b") as handle, _crc32_on():
            writer = _Crc32Writer(handle)
            torch.save(state, cast(IO[bytes], writer))  # a file object: only write() is used
            _append_digest(handle, writer)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, (OSError, RuntimeError)):
            # torch.save turns the OSError of a write (ENOSPC...) into "unexpected pos": the writer kept it
            cause = writer.error if writer is not None and writer.error is not None else error
            raise _write_failed(target, cause) from error
        raise
    _fsync_directory(target.parent)
    return target


def _save_remote(state: dict[str, Any], target: Location) -> Location:
    assert isinstance(target, RemotePath)

    def write(handle: IO[bytes]) -> None:
        stream = _HeldTail(handle)
        with _crc32_on():
            torch.save(state, cast(IO[bytes], stream))
        stream.finish()

    loop = state.get("loop")
    step = loop.get("global_step") if isinstance(loop, dict) else None
    sharded = state.get("sharded")
    try:
        target.write_object(write, step if isinstance(step, int) else None,
                            resumable=isinstance(loop, dict) and state.get("weights_only") is not True,
                            shards=sharded.get("folder") if isinstance(sharded, dict) else None)
    except (CheckpointError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as error:  # noqa: BLE001 - said with the path and what is intact
        raise OSError(errno.EIO, f"Checkpoint {str(target)!r} could not be written ({first_line(error)}). The previous "
                      "checkpoint at that path, if any, is intact and nothing partial is visible there.") from error
    return target


def _write_failed(target: Path, error: BaseException) -> OSError:
    """A failed write, said plainly: which file, why (a full disk, most often), what is intact."""
    code = getattr(error, "errno", None)
    text = first_line(error)
    full = code == errno.ENOSPC or "unexpected pos" in text or "file write failed" in text.lower()
    try:
        free = f"; {shutil.disk_usage(target.parent).free / 2**20:.0f} MiB free there once the partial file was removed"
    except OSError:
        free = ""
    if code == errno.ENOSPC or full or (code is not None and code == getattr(errno, "EDQUOT", None)):
        reason = ("the disk is full (ENOSPC)" if code == errno.ENOSPC else "the disk quota is exceeded (EDQUOT)"
                  if code is not None and code == getattr(errno, "EDQUOT", None) else "the write failed, most likely a full disk")
        advice = "Free space or choose another root_dir / dirpath, then save again."
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason, free = "this process may not write there", ""
        advice = "Make the folder writable or choose another root_dir / dirpath, then save again."
    elif code in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
        reason, free = "the path, or a folder on it, is in the way", ""
        advice = "Remove or rename what is at that path, or choose another root_dir / dirpath, then save again."
    else:
        reason, free = "the write failed", ""
        advice = "Fix the cause named above or choose another root_dir / dirpath, then save again."
    return OSError(
        code or errno.EIO,
        f"Checkpoint {str(target)!r} could not be written: {reason} ({text}{free}). The previous file "
        f"at that path, if any, is intact and no partial file was left. {advice}",
    )


def other_kind_at(target: Path, *, sharded: bool) -> CheckpointError:
    """A save that would put a single file where a sharded folder is (or the reverse): refused,
    so one checkpoint never silently replaces a checkpoint of another strategy."""
    there, this = ("a single file", "a sharded folder (strategy='fsdp')") if sharded else (
        "a sharded checkpoint folder (written under strategy='fsdp')", "a single file")
    return CheckpointError(
        f"Checkpoint {str(target)!r} is {there}, and this save writes {this}: it would replace a checkpoint "
        "written under another strategy. Nothing was written. Expected the strategy (and number of processes) "
        "that wrote it, or another path: another run folder (Trainer(run_name=...)), or move that checkpoint away."
    )


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows: directories can't be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ reading
def load_checkpoint(path: str | os.PathLike[str] | RemotePath, map_location: Any = "cpu", *,
                    verify: bool = True) -> dict[str, Any]:
    """Load and check a checkpoint; raise `CheckpointError` naming the file and the problem.

    Args:
        path: the checkpoint file (or a URL: `s3://...`, copied to a local temporary file first).
        map_location: passed to `torch.load`.
        verify: check the file's CRC-32 first (reads the file once more; on by default): the
            whole file's, stored by `save_atomic`, or every entry's in a file without it.
    """
    source = location(path)
    name = repr(str(source))
    if not source.is_file():
        what = "is a directory" if source.is_dir() else "does not exist"
        raise CheckpointError(
            f"Checkpoint {name} {what}. Expected the path of a file written by "
            "Trainer.save_checkpoint (or ckpt_path='last' to resume the newest run)."
        )
    if isinstance(source, RemotePath):
        with source.local_copy() as local:
            state = _load_file(local, name, map_location, verify)
    else:
        state = _load_file(source, name, map_location, verify)
    state["_path"] = str(source)  # in memory only: lets later errors name the file
    return state


def _load_file(source: Path, name: str, map_location: Any, verify: bool) -> dict[str, Any]:
    """A local file's checks and load (`name`: how messages call it)."""
    _check_archive(source, name, verify)
    try:
        # mmap: tensors are read from the page cache as they are used, not copied into this
        # process's memory first (every DDP rank loading the same file shares the pages); what
        # restore copies into the model and optimizer is all that stays. The file is replaced,
        # never rewritten in place, so a mapping stays valid.
        state = torch.load(source, map_location=map_location, weights_only=True, mmap=True)
    except MemoryError:
        raise
    except pickle.UnpicklingError as error:
        lightning = lightning_refusal(source, name, _unsafe_detail(error))
        if lightning is not None:
            raise CheckpointError(lightning) from None
        raise CheckpointError(
            f"Checkpoint {name} holds objects that are not plain data or tensors, so it was refused "
            f"without running any of it ({_unsafe_detail(error)}). Only files written by "
            "Trainer.save_checkpoint can be loaded."
        ) from None
    except Exception as error:  # noqa: BLE001 - any failure to parse means a damaged file
        raise _corrupt(name, f"{type(error).__name__}: {first_line(error)}") from None
    if is_lightning(state):  # a PyTorch Lightning checkpoint: read into our layout
        try:
            state = {**from_lightning(state, name), "format": FORMAT, "format_version": FORMAT_VERSION}
        except ValueError as error:
            raise CheckpointError(str(error)) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"Checkpoint {name} is not a checkpoint of this trainer (no {FORMAT!r} marker). "
            f"Expected a file written by Trainer.save_checkpoint. {foreign_advice(state)}"
        )
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {name} has format version {version!r}, newer than this version of the "
            f"trainer reads ({FORMAT_VERSION}). Upgrade the package to load it."
        )
    upgrade(state)  # an older version of ours: the current keys, in memory
    return state


def _check_archive(source: Path, name: str, verify: bool) -> None:
    """A torch.save file is a zip archive; check it is whole before unpickling anything.

    Any failure to read it (zipfile raises NotImplementedError for a damaged version
    field, for one) is a `CheckpointError` naming the file; MemoryError is not hidden.
    """
    with open(source, "rb") as handle:
        head = handle.read(4)
        if len(head) < 4:
            raise _corrupt(name, f"the file is {source.stat().st_size} bytes long")
        if head != _ZIP_MAGIC:
            raise CheckpointError(
                f"Checkpoint {name} is not a torch.save archive (it starts with {head!r}, expected "
                f"{_ZIP_MAGIC!r}): either it is not a checkpoint or its beginning is corrupt. Expected "
                "a file written by Trainer.save_checkpoint."
            )
        try:
            digest = _stored_digest(handle, name) if verify else None
            if digest is not None:
                _check_digest(handle, name, digest)
                return  # every byte is as save_atomic wrote it
        except (CheckpointError, MemoryError):
            raise
        except Exception as error:  # noqa: BLE001 - a file that can't be read this far is damaged
            raise _corrupt(name, f"{type(error).__name__}: {first_line(error)}") from None
    try:
        with zipfile.ZipFile(source) as archive:
            for entry in archive.infolist():
                if entry.is_dir() or entry.external_attr & 0x10:  # torch.save writes files only; torch's
                    raise _corrupt(name, f"entry {entry.filename!r} is marked as a directory")  # reader skips these
            if verify:
                for entry in archive.infolist():
                    if entry.CRC == 0 and entry.file_size:  # written without checksums
                        continue
                    with archive.open(entry) as member:
                        while member.read(1 << 24):  # the CRC is checked at the end of the entry
                            pass
    except (CheckpointError, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - any failure to read the archive means a damaged file
        raise _corrupt(name, f"{type(error).__name__}: {first_line(error)}") from None


def _unsafe_detail(error: BaseException) -> str:
    for line in str(error).splitlines():
        if "global" in line.lower():
            return line.strip()
    return first_line(error)


def remove_checkpoint(path: str | os.PathLike[str] | RemotePath) -> None:
    """Delete a checkpoint: a file, an object, or an FSDP run's folder of shards (nothing if it is gone)."""
    remove(location(path))
