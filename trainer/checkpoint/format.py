"""Checkpoint files: atomic writes, checked loads that never execute code, the whole state.

A checkpoint is a dict of `state_dict`s and plain data with a format marker (layout in
docs/checkpoints.md). `save_atomic` writes it to a temporary file beside the target,
flushes and fsyncs it, then `os.replace`s it over the target, so a crash at any moment
leaves the previous file intact; the CRC-32 of the whole archive is stored as its zip comment.
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

import collections
import contextlib
import errno
import logging
import os
import pickle
import re
import shutil
import struct
import sys
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import torch

from trainer._utils import first_line
from trainer.checkpoint.layout import upgrade
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

FORMAT = "loopwright.checkpoint"
FORMAT_VERSION = 3  # 3: Lightning's keys too; 2: lists of optimizers and schedulers with their classes (both still read)
_TMP_SUFFIX = ".tmp"
_ZIP_MAGIC = b"PK\x03\x04"
_END_RECORD = b"PK\x05\x06"  # a zip's end-of-central-directory record: 22 bytes, then its comment
_END_RECORD_SIZE = 22
_DIGEST_PREFIX = b"loopwright-crc32="  # the comment save_atomic writes: this, then 8 hex digits
_DIGEST_SIZE = len(_DIGEST_PREFIX) + 8


class CheckpointError(ValueError):
    """A checkpoint file is missing, damaged, foreign or does not fit the run."""


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


@contextlib.contextmanager
def _crc32_on() -> Iterator[None]:
    """torch.save writes CRC-32 sums by default; make sure, and restore the switch after."""
    get = getattr(torch.serialization, "get_crc32_options", None)
    if get is None:
        yield
        return
    previous = get()
    torch.serialization.set_crc32_options(True)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(previous)


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


class _HeldTail:
    """The stream `torch.save` writes to for an upload: bytes pass straight through, but for the
    last 22 (the zip's end record), held back so the checksum goes into its comment on `finish`,
    as `_append_digest` does in place for a local file (an upload can't seek back)."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.crc, self.tail = handle, 0, b""

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        if len(view) >= _END_RECORD_SIZE:
            if self.tail:
                self.handle.write(self.tail)
            self.handle.write(view[:-_END_RECORD_SIZE])
            self.tail = bytes(view[-_END_RECORD_SIZE:])
        else:
            joined = self.tail + bytes(view)
            cut = max(len(joined) - _END_RECORD_SIZE, 0)
            if cut:
                self.handle.write(joined[:cut])
            self.tail = joined[cut:]
        return len(view)

    def flush(self) -> None:
        pass

    def finish(self) -> None:
        end = self.tail
        if len(end) == _END_RECORD_SIZE and end[:4] == _END_RECORD and end[-2:] == b"\x00\x00":
            end = end[:-2] + struct.pack("<H", _DIGEST_SIZE) + _DIGEST_PREFIX + b"%08x" % self.crc
        self.handle.write(end)


class _Crc32Writer:
    """The file `torch.save` writes to, keeping the CRC-32 of every byte (it writes sequentially)."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.crc, self.size = handle, 0, 0
        self.error: OSError | None = None  # the first failed write: torch.save reports it without its errno

    def write(self, data: Any) -> int:
        self.crc = zlib.crc32(data, self.crc)
        self.size += memoryview(data).nbytes
        try:
            return int(self.handle.write(data))
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.handle.flush()


def _append_digest(handle: Any, writer: _Crc32Writer) -> None:
    """Store the CRC-32 of the archive as written (comment length 0) as its zip comment.

    The comment is part of the zip format: `torch.load` and `zipfile` read the file as before.
    Left out, with the file still valid, if the archive does not end as torch.save's do.
    """
    handle.flush()
    if handle.tell() != writer.size or writer.size < _END_RECORD_SIZE:
        return
    handle.seek(-_END_RECORD_SIZE, os.SEEK_END)
    end = handle.read(_END_RECORD_SIZE)
    if end[:4] != _END_RECORD or end[-2:] != b"\x00\x00":
        return
    handle.seek(-2, os.SEEK_END)
    handle.write(struct.pack("<H", _DIGEST_SIZE) + _DIGEST_PREFIX + b"%08x" % writer.crc)


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
            "Expected a file written by Trainer.save_checkpoint; to load bare weights, use "
            "module.load_state_dict(torch.load(path, weights_only=True))."
        )
    version = state.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {name} has format version {version!r}, newer than this version of the "
            f"trainer reads ({FORMAT_VERSION}). Upgrade the package to load it."
        )
    upgrade(state)  # an older version of ours: the current keys, in memory
    return state


# What restore_state reads, with the type each entry must have (checked before anything is touched).
_REQUIRED: dict[str, type | tuple[type, ...]] = {"module": dict, "loop": dict, "precision": dict, "rng": list}
_LOOP_KEYS = ("epoch", "global_step", "batches_done")


def check_layout(state: dict[str, Any], *, weights_only: bool = False) -> None:
    """Raise `CheckpointError` naming the file when a loaded checkpoint lacks what a resume
    (or, with `weights_only`, an evaluation) reads; called before anything is touched."""
    name = repr(state.get("_path", "<in memory>"))
    problems = []
    for key, kind in _REQUIRED.items():
        if weights_only and key != "module":
            continue
        if key not in state:
            problems.append(f"no {key!r} entry")
        elif not isinstance(state[key], kind):
            problems.append(f"{key!r} is a {type(state[key]).__name__}")
    if isinstance(state.get("rng"), list) and not state["rng"]:
        problems.append("'rng' is empty (no process's random state)")
    if isinstance(state.get("loop"), dict):
        missing = [k for k in _LOOP_KEYS if not isinstance(state["loop"].get(k), int)]
        if missing:
            problems.append(f"'loop' lacks {', '.join(missing)}")
    if isinstance(state.get("precision"), dict) and not {"name", "state"} <= set(state["precision"]):
        problems.append("'precision' lacks name/state")
    if problems and state.get("weights_only") is True:
        raise CheckpointError(
            f"Checkpoint {name} holds the model's weights only (ModelCheckpoint(save_weights_only=True)), "
            "so a run can't resume from it. Expected a full checkpoint (last.ckpt, or one saved without "
            "save_weights_only); to evaluate these weights use trainer.validate/test(..., ckpt_path=path)."
        )
    if problems:
        raise CheckpointError(
            f"Checkpoint {name} has the trainer's format marker but is incomplete: {'; '.join(problems)}. "
            "Expected a file written whole by Trainer.save_checkpoint; use another checkpoint."
        )


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


def _stored_digest(handle: Any, name: str) -> int | None:
    """The whole-file CRC-32 `save_atomic` stored as the zip comment; None for a file that
    ends without a comment (an older checkpoint, a plain torch.save file)."""
    size = handle.seek(0, os.SEEK_END)
    if size >= _END_RECORD_SIZE:
        handle.seek(size - _END_RECORD_SIZE)
        end = handle.read(_END_RECORD_SIZE)
        if end[:4] == _END_RECORD and end[-2:] == b"\x00\x00":
            return None
    if size >= _END_RECORD_SIZE + _DIGEST_SIZE:
        handle.seek(size - _END_RECORD_SIZE - _DIGEST_SIZE)
        tail = handle.read(_END_RECORD_SIZE + _DIGEST_SIZE)
        end, comment = tail[:_END_RECORD_SIZE], tail[_END_RECORD_SIZE:]
        digits = comment[len(_DIGEST_PREFIX):]
        if (
            end[:4] == _END_RECORD
            and end[-2:] == struct.pack("<H", _DIGEST_SIZE)
            and comment.startswith(_DIGEST_PREFIX)
            and re.fullmatch(rb"[0-9a-f]{8}", digits)
        ):
            return int(digits, 16)
    raise _corrupt(
        name,
        "its end is damaged: no intact end-of-archive record with the checksum Trainer.save_checkpoint writes",
    )


def _check_digest(handle: Any, name: str, expected: int) -> None:
    """Every byte before the comment, with the comment length as torch.save wrote it (0)."""
    remaining = handle.seek(0, os.SEEK_END) - _DIGEST_SIZE - 2
    handle.seek(0)
    crc, buffer = 0, bytearray(1 << 20)
    view = memoryview(buffer)
    while remaining > 0:
        count = handle.readinto(view[: min(len(buffer), remaining)])
        if not count:
            break
        crc = zlib.crc32(view[:count], crc)
        remaining -= count
    crc = zlib.crc32(b"\x00\x00", crc)
    if remaining or crc != expected:
        raise _corrupt(name, f"its CRC-32 is {crc:08x}, the file records {expected:08x}: bytes changed after it was written")


def _corrupt(name: str, detail: str) -> CheckpointError:
    return CheckpointError(
        f"Checkpoint {name} is truncated or corrupt and can't be read ({detail}). Use an earlier "
        "checkpoint; an interrupted save never replaces a good file, so the previous one is "
        "still beside it if it existed."
    )


def _unsafe_detail(error: BaseException) -> str:
    for line in str(error).splitlines():
        if "global" in line.lower():
            return line.strip()
    return first_line(error)


_PLAIN_LEAVES = (bool, int, float, complex, str, bytes, type(None), torch.Tensor, torch.dtype, torch.device, torch.Size)


def plain_state(
    value: Any, target: Any = None, where: str = "checkpoint", _seen: dict[int, Any] | None = None, *, as_text: bool = False
) -> Any:
    """`value` with NumPy scalars and arrays turned into Python numbers and tensors, so the
    file loads with `torch.load(weights_only=True)`; anything else that is not plain data
    fails the save at once, naming the entry (a checkpoint that can't be loaded back is
    worse than no checkpoint). A dict or list met twice (Lightning's `state_dict` is our
    `module`) stays one object, which the file stores once.

    With `as_text=True`, for what describes a run (its arguments, hyperparameters, a YAML
    run's config), nothing fails: mappings get text keys, tuples become lists, and anything
    but None, a bool, a number or a string is kept as its text.

    Example:
        >>> import numpy as np
        >>> plain_state({"lr": np.float64(0.5), "steps": [np.int64(3)]})
        {'lr': 0.5, 'steps': [3]}
        >>> from pathlib import Path
        >>> plain_state({"root_dir": Path("runs"), "betas": (0.9, 0.99)}, as_text=True)
        {'root_dir': 'runs', 'betas': [0.9, 0.99]}
    """
    if as_text:
        if isinstance(value, dict):
            return {str(key): plain_state(item, as_text=True) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain_state(item, as_text=True) for item in value]
        return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):  # before the leaves: np.float64 is a float
        return value.item()
    if isinstance(value, _PLAIN_LEAVES):
        return value
    if not isinstance(value, (dict, list, tuple)):
        if numpy is not None and isinstance(value, numpy.ndarray):
            return torch.from_numpy(value.copy())
        raise CheckpointError(
            f"Can't write checkpoint {str(target)!r}: {where} is a {type(value).__module__}.{type(value).__qualname__}, "
            "which torch.load(weights_only=True) would refuse, so the file could never be loaded. Expected "
            "tensors, numbers, strings, lists and dicts: convert it (e.g. float(x), x.tolist()) in the "
            "state_dict or on_save_checkpoint that adds it."
        )
    seen = {} if _seen is None else _seen
    if id(value) in seen:
        return seen[id(value)]
    result: Any
    if isinstance(value, dict):
        items = {key: plain_state(item, target, f"{where}[{key!r}]", seen) for key, item in value.items()}
        result = collections.OrderedDict(items) if isinstance(value, collections.OrderedDict) else items
    else:
        items_list = [plain_state(item, target, f"{where}[{index}]", seen) for index, item in enumerate(value)]
        result = items_list if isinstance(value, list) else tuple(items_list)
    seen[id(value)] = result
    return result


def remove_checkpoint(path: str | os.PathLike[str] | RemotePath) -> None:
    """Delete a checkpoint: a file, an object, or an FSDP run's folder of shards (nothing if it is gone)."""
    remove(location(path))

