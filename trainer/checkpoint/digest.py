"""The whole-file CRC-32 a checkpoint carries as its zip comment: written as `torch.save` streams
the archive (to a file, or to an upload that can't seek back), read back and checked before a load.

A zip archive ends with a 22-byte end record whose last two bytes give the length of a comment;
`torch.save` writes none. The digest is `loopwright-crc32=` and 8 hex digits, the CRC-32 of every
byte before it with the comment length still 0, so the archive stays a valid zip that `torch.load`
and `zipfile` read as before.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import torch

from trainer.checkpoint.schema import _corrupt

_END_RECORD = b"PK\x05\x06"  # a zip's end-of-central-directory record: 22 bytes, then its comment
_END_RECORD_SIZE = 22
_DIGEST_PREFIX = b"loopwright-crc32="  # the comment save_atomic writes: this, then 8 hex digits
_DIGEST_SIZE = len(_DIGEST_PREFIX) + 8


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
