"""`RemotePath`: a checkpoint's location at an fsspec URL (`s3://bucket/run/last.ckpt`), with the
few `Path` operations checkpoints use (`/`, `name`, `parent`, `exists`, `iterdir`, `unlink`, ...)
over the protocol's file system, and the errors that say what to check when it can't be used.

**Whole or not at all.** An object store has no rename, so a checkpoint is written straight to
its final name as one upload that is committed last: `write_object` opens the object with
fsspec's `autocommit=False` (for S3: a multipart upload), writes every byte, and only then
commits it (completes the upload). Until that moment the object does not exist for any reader
and an object already at that name is untouched; a process killed before it leaves only an
incomplete upload, which no listing shows and the next save of that checkpoint aborts (an S3
lifecycle rule "abort incomplete multipart uploads" reclaims the others), and an error during the
write aborts it. Readers therefore never
see a half-written checkpoint, and the whole-file CRC-32 (`format.py`) still guards every byte.

**Reading** copies the object to a local temporary file, then the usual checks run on it (the
CRC-32, `torch.load(weights_only=True)`); the copy is removed once loaded.

**Credentials and endpoint** come from the protocol's usual sources (for S3: `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`, `~/.aws`, an instance role),
or from `storage_options` (`Trainer(storage_options={...})`), passed to the file system as is.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["RemotePath", "StorageError", "explain", "filesystem"]

_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}


class StorageError(OSError):
    """A remote checkpoint location can't be used: a missing package, bucket, credentials or endpoint."""


class _Stat:
    def __init__(self, mtime_ns: int, size: int) -> None:
        self.st_mtime_ns, self.st_size = mtime_ns, size


class RemotePath:
    """A URL with the part of `pathlib.Path`'s interface checkpoints use; compares by its URL."""

    __slots__ = ("url", "options", "_info")

    def __init__(self, url: str, options: Mapping[str, Any] | None = None, _info: dict[str, Any] | None = None) -> None:
        protocol, _, rest = url.partition("://")
        parts = [part for part in rest.split("/") if part not in ("", ".")]
        self.url = f"{protocol}://{'/'.join(parts)}"
        self.options = dict(options or {})
        self._info = _info  # what a listing said of the object (size, time), until it changes

    # ----------------------------------------------------------------- pure path
    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemotePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __truediv__(self, other: str | os.PathLike[str]) -> RemotePath:
        return RemotePath(f"{self.url}/{os.fspath(other)}", self.options)

    @property
    def protocol(self) -> str:
        return self.url.partition("://")[0]

    @property
    def key(self) -> str:
        """The path inside the file system (`bucket/run/last.ckpt`), as fsspec takes it."""
        return self.url.partition("://")[2]

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]

    @property
    def suffix(self) -> str:
        name = self.name
        return name[name.rfind("."):] if "." in name.lstrip(".") else ""

    @property
    def parent(self) -> RemotePath:
        head = self.key.rpartition("/")[0]
        return RemotePath(f"{self.protocol}://{head}", self.options) if head else self

    @property
    def parents(self) -> list[RemotePath]:
        found, current = [], self
        while current.parent != current:
            current = current.parent
            found.append(current)
        return found

    def with_name(self, name: str) -> RemotePath:
        return self.parent / name

    def is_relative_to(self, other: Any) -> bool:
        return isinstance(other, RemotePath) and (other == self or other in self.parents)

    def absolute(self) -> RemotePath:
        return self

    def resolve(self) -> RemotePath:
        return self

    # ----------------------------------------------------------------- the file system
    @property
    def fs(self) -> Any:
        return filesystem(self.protocol, self.options)

    def _details(self) -> dict[str, Any] | None:
        if self._info is not None:
            return self._info
        try:
            return dict(self.fs.info(self.key))
        except FileNotFoundError as error:
            if "bucket" in str(error).lower():  # not this object: its bucket
                raise explain(self, error) from None
            return None
        except Exception as error:  # noqa: BLE001 - a bucket, credentials or network problem: said plainly
            raise explain(self, error) from None

    def exists(self) -> bool:
        return self._details() is not None

    def is_file(self) -> bool:
        details = self._details()
        return details is not None and details.get("type") == "file"

    def is_dir(self) -> bool:
        details = self._details()
        return details is not None and details.get("type") == "directory"

    def is_symlink(self) -> bool:
        return False

    def stat(self) -> _Stat:
        details = self._details()
        if details is None:
            raise FileNotFoundError(self.url)
        return _Stat(self._written_ns(details), int(details.get("size") or 0))

    def _metadata(self, details: dict[str, Any]) -> dict[str, str]:
        """S3: the object's metadata (`write_object`'s), read once (a HEAD request); {} elsewhere."""
        if "_metadata" not in details:
            details["_metadata"] = {}
            if self.protocol in ("s3", "s3a"):
                with contextlib.suppress(Exception):  # none: the object's own time, and a read to learn its step
                    details["_metadata"] = dict(self.fs.metadata(self.key))
        return dict(details["_metadata"])

    def hints(self) -> tuple[int | None, bool] | None:
        """The step a checkpoint records and whether it can resume a run, as `write_object` stored
        them beside it (S3 metadata): no download needed to rank it. None: not stored."""
        details = self._details()
        metadata = self._metadata(details) if details is not None else {}
        if _RESUMABLE not in metadata:
            return None
        step = metadata.get(_STEP, "")
        return (int(step) if step.isdigit() else None), metadata[_RESUMABLE] == "1"

    def shards_folder(self) -> str | None:
        """S3: the version folder of FSDP's shards this checkpoint object commits (`write_object`'s
        metadata, relative to its folder), or None: a single-file checkpoint, or not known."""
        details = self._details()
        return (self._metadata(details).get(_SHARDS) or None) if details is not None else None

    def _written_ns(self, details: dict[str, Any]) -> int:
        """When the checkpoint was written (ns): S3's object metadata `write_object` sets, which a
        copy keeps (a kept `last-step=N.ckpt` is as old as the file it keeps, as a hard link is on
        disk); else the object's time (S3's `LastModified`: whole seconds, a copy's own)."""
        written = self._metadata(details).get(_WRITTEN, "")
        if written.isdigit():
            return int(written)
        # S3's own time has whole seconds: an object written by other means (a copy made with
        # other tools) counts as written at the end of its second, never older than it may be
        return _mtime_ns(details) + (999_999_999 if self.protocol in ("s3", "s3a") else 0)

    def iterdir(self) -> Iterator[RemotePath]:
        try:
            entries = self.fs.ls(self.key, detail=True, refresh=True)
        except FileNotFoundError:
            return iter(())
        except Exception as error:  # noqa: BLE001
            raise explain(self, error) from None
        return iter([RemotePath(f"{self.protocol}://{entry['name']}", self.options, dict(entry))
                     for entry in entries if entry["name"].rstrip("/") != self.key])

    def walk_files(self) -> list[RemotePath]:
        """Every object below this prefix (with its size and time from the listing)."""
        try:
            self.fs.invalidate_cache()
            found = self.fs.find(self.key, detail=True)
        except FileNotFoundError:
            return []
        except Exception as error:  # noqa: BLE001
            raise explain(self, error) from None
        return [RemotePath(f"{self.protocol}://{name}", self.options, dict(info))
                for name, info in sorted(found.items()) if info.get("type", "file") == "file"]

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to make: an object store has no folders (an object's prefix is enough)."""

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.rm_file(self.key)
        except FileNotFoundError:
            if not missing_ok:
                raise
        self._info = None

    def copy_to(self, target: RemotePath) -> None:
        """A server-side copy (one request; it appears whole, and keeps the metadata: its time of writing)."""
        self.fs.copy(self.key, target.key)

    def write_object(self, write: Callable[[IO[bytes]], None], step: int | None = None, resumable: bool = False,
                     shards: str | None = None) -> None:
        """Write the object through `write(handle)`, committed only once `write` returned (see the
        module); on S3 its time of writing, `step`, `resumable` and the folder of the FSDP shards it
        commits (`shards`) are stored as its metadata."""
        self._info = None
        self._abort_stale_uploads()
        metadata = {_WRITTEN: str(time.time_ns()), _RESUMABLE: "1" if resumable else "0",
                    **({_STEP: str(step)} if step is not None else {}), **({_SHARDS: shards} if shards else {})}
        extra = {"Metadata": metadata} if self.protocol in ("s3", "s3a") else {}
        try:
            handle = self.fs.open(self.key, "wb", autocommit=False, **extra)
        except Exception as error:  # noqa: BLE001
            raise explain(self, error) from None
        try:
            write(handle)
            handle.close()  # the last part is uploaded; nothing is visible yet
            handle.commit()  # the object appears, whole
        except BaseException:
            with contextlib.suppress(Exception):
                handle.discard()  # the incomplete upload is aborted: the previous object, if any, is intact
            raise

    def _abort_stale_uploads(self) -> None:
        """S3: the incomplete uploads of this object that killed saves left (invisible, but billed)
        are aborted before a new one starts; only one process writes a given checkpoint."""
        fs = self.fs
        if self.protocol not in ("s3", "s3a") or not callable(getattr(fs, "call_s3", None)):
            return
        bucket, _, key = self.key.partition("/")
        with contextlib.suppress(Exception):  # best effort: a leftover costs space, never correctness
            for upload in fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key).get("Uploads", []):
                if upload.get("Key") == key:
                    fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload["UploadId"])

    @contextlib.contextmanager
    def local_copy(self) -> Iterator[Path]:
        """The object copied to a local temporary file, removed on leaving (a mapping of it stays valid)."""
        handle, name = tempfile.mkstemp(prefix=".remote-", suffix=".ckpt")
        os.close(handle)
        local = Path(name)
        try:
            try:
                self.fs.get_file(self.key, str(local))
            except FileNotFoundError:
                raise
            except Exception as error:  # noqa: BLE001
                raise explain(self, error) from None
            yield local
        finally:
            with contextlib.suppress(OSError):  # Windows: a mapped file can't be removed
                local.unlink()


_WRITTEN = "loopwright-written-ns"  # S3 metadata: the time a checkpoint was written,
_STEP = "loopwright-step"  # the optimizer step it records,
_RESUMABLE = "loopwright-resumable"  # whether it resumes a run ("1") or holds weights only ("0"),
_SHARDS = "loopwright-shards"  # and the version folder of FSDP's shards it commits (sharded_remote.py)


def _mtime_ns(details: Mapping[str, Any]) -> int:
    """An object's time of writing in ns (S3: `LastModified`, whole seconds), 0 when unknown."""
    for key in ("LastModified", "mtime", "updated", "last_modified", "created"):
        value = details.get(key)
        if isinstance(value, datetime.datetime):
            return int(value.timestamp() * 1e9)
        if isinstance(value, (int, float)):
            return int(value * 1e9)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return int(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
    return 0


def filesystem(protocol: str, options: Mapping[str, Any] | None = None) -> Any:
    """The fsspec file system of `protocol` (fsspec keeps one per protocol and options)."""
    try:
        import fsspec
    except ImportError:
        raise StorageError(_missing_package(protocol, "fsspec")) from None
    try:
        return fsspec.filesystem(protocol, **dict(options or {}))
    except ImportError as error:
        raise StorageError(_missing_package(protocol, getattr(error, "name", None) or str(error))) from None
    except ValueError as error:
        raise StorageError(f"Checkpoint location {protocol}://... can't be used: {error}. Expected a protocol fsspec "
                           "knows (s3://, gs://, az://, ...).") from None


def _missing_package(protocol: str, package: str) -> str:
    extra = _EXTRAS.get(protocol)
    install = f"pip install 'loopwright[{extra}]'" if extra == "s3" else f"pip install fsspec and its {protocol} package"
    return (f"Checkpoint paths starting with {protocol}:// need a package that is not installed ({package}). "
            f"Install it ({install}), or use a local path.")


def explain(where: RemotePath, error: BaseException) -> StorageError:
    """A file-system error on `where`, said with what to check (bucket, credentials, endpoint)."""
    text = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    lowered = text.lower()
    bucket = where.key.partition("/")[0]
    endpoint = where.options.get("endpoint_url") or (where.options.get("client_kwargs") or {}).get("endpoint_url") or \
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    at = f" at {endpoint}" if endpoint and where.protocol in ("s3", "s3a") else ""
    if "bucket" in lowered and ("not exist" in lowered or "nosuchbucket" in lowered):
        advice = f"the bucket {bucket!r} does not exist{at}. Create it, or fix the bucket name in the path"
    elif any(word in lowered for word in ("credential", "accessdenied", "access denied", "forbidden", "signature",
                                          "invalidaccesskeyid", "permission", "403", "token")):
        advice = ("the credentials were refused or are missing. Check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                  "(or AWS_PROFILE, the instance role, Trainer(storage_options={'key': ..., 'secret': ...})) and that "
                  f"they may read and write {where.protocol}://{bucket}")
    elif any(word in lowered for word in ("connect", "endpoint", "timed out", "timeout", "name or service", "resolve")):
        advice = (f"the storage endpoint{at or ''} can't be reached. Check AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 (or "
                  "Trainer(storage_options={'endpoint_url': ...})), the network, and that the server is running")
    else:
        advice = "see the error above"
    return StorageError(f"Checkpoint location {where.url!r} can't be used: {advice} ({text}).")
