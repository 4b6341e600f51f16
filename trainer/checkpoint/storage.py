"""Where a checkpoint lives: a local path, or an fsspec URL such as `s3://bucket/run/last.ckpt`.

Local paths stay `pathlib.Path` and keep their own code (temporary file, fsync, `os.replace`):
nothing here is on their way. A URL (any `protocol://` but `file://`) becomes a `RemotePath`
(`remote_path.py`), which offers the few `Path` operations checkpoints use (`/`, `name`, `parent`,
`exists`, `iterdir`, `unlink`, ...) over the protocol's fsspec file system (`s3://` needs s3fs:
`pip install 'loopwright[s3]'`, imported only when such a path is used). A checkpoint at a URL is
written whole or not at all (one upload committed last) and read through a local copy checked as
a local file is; credentials and endpoint come from the protocol's usual sources or from
`Trainer(storage_options={...})` (see `remote_path.py`).

Example:
    >>> location("s3://bucket/run") / "last.ckpt"
    RemotePath('s3://bucket/run/last.ckpt')
    >>> location("runs/exp") / "last.ckpt"
    PosixPath('runs/exp/last.ckpt')
    >>> is_remote("s3://bucket/run"), is_remote("runs/exp"), is_remote("file:///tmp/x")
    (True, False, False)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from trainer._utils import is_url
from trainer.checkpoint.remote_path import RemotePath, StorageError, explain, filesystem

__all__ = ["Location", "RemotePath", "StorageError", "check_reachable", "identity", "is_remote", "location", "remove"]


def is_remote(path: Any) -> bool:
    """Whether `path` is a URL of a remote file system (anything `protocol://` but `file://`)."""
    return isinstance(path, RemotePath) or is_url(path)


def location(path: str | os.PathLike[str] | RemotePath, options: Mapping[str, Any] | None = None) -> Location:
    """A checkpoint location: a `RemotePath` for a URL (with `options` for its file system), else a `Path`
    (a `file://` URL loses its protocol)."""
    if isinstance(path, RemotePath):
        return path if options is None or path.options else RemotePath(path.url, options)
    if isinstance(path, str) and is_remote(path):
        return RemotePath(path, options)
    if isinstance(path, str) and path.startswith("file://"):
        return Path(path[len("file://"):])
    return Path(path)


def identity(path: str | os.PathLike[str] | RemotePath) -> str:
    """What makes two spellings of one checkpoint equal: a URL as normalised, a local path resolved."""
    where = location(path)
    return str(where) if isinstance(where, RemotePath) else str(where.absolute().resolve())


Location = Union[Path, RemotePath]


def check_reachable(where: RemotePath) -> None:
    """Before any training: the bucket of `where` exists and the credentials may list it, or a
    `StorageError` says what is wrong (a missing bucket, refused credentials, no endpoint)."""
    fs = where.fs
    if where.protocol in ("s3", "s3a"):  # a quick answer: botocore's and s3fs's retries take seconds on a closed port
        config = {**dict(where.options.get("config_kwargs") or {}), "connect_timeout": 10, "retries": {"max_attempts": 2}}
        fs = filesystem(where.protocol, {**where.options, "config_kwargs": config,
                                         "skip_instance_cache": True})
        if isinstance(getattr(fs, "retries", None), int):
            fs.retries = 1  # s3fs's own retries of a failed connection (its class default: 5, with backoff)
    bucket = where.key.partition("/")[0]
    try:
        fs.invalidate_cache()
        fs.ls(bucket, refresh=True)
    except Exception as error:  # noqa: BLE001
        if isinstance(error, FileNotFoundError) and "bucket" not in str(error).lower():
            return
        raise explain(where, error) from None

def remove(path: Location) -> None:
    """Delete a checkpoint: a file, an object, or a sharded folder (nothing if it is gone)."""
    if isinstance(path, RemotePath):
        path.unlink(missing_ok=True)
        return
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
