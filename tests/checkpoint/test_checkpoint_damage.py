"""A damaged checkpoint never loads: one flipped byte anywhere (zip headers and directory
included) raises `CheckpointError` naming the file, never another exception and never a
state with other numbers. `save_atomic` stores the CRC-32 of the whole archive as its zip
comment; files without it (plain torch.save, older checkpoints) are still read and checked
entry by entry."""

from __future__ import annotations

import random
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.checkpoints import shuffled, trainer
from tests.helpers.reference import make_data, make_model
from trainer.checkpoint import format as checkpoint_module
from trainer.checkpoint import FORMAT, FORMAT_VERSION, CheckpointError, load_checkpoint


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real checkpoint of a small run (every kind of entry: weights, optimizer, RNG, data order)."""
    root = tmp_path_factory.mktemp("run")
    run = trainer(root, max_steps=3)
    run.fit(make_model(), shuffled(make_data()))
    return run.log_dir / "last.ckpt"


def header_offsets(raw: bytes, path: Path) -> list[int]:
    """Every byte of each local file header and of the central directory and end record."""
    offsets: list[int] = []
    with zipfile.ZipFile(path) as archive:
        for entry in archive.infolist():
            start = entry.header_offset
            name_length, extra_length = struct.unpack("<HH", raw[start + 26 : start + 30])
            offsets.extend(range(start, start + 30 + name_length + extra_length))
        offsets.extend(range(archive.start_dir, len(raw)))  # type: ignore[attr-defined]
    return offsets


def flipped(raw: bytes, offset: int, target: Path) -> Path:
    damaged = bytearray(raw)
    damaged[offset] ^= 0xFF
    target.write_bytes(bytes(damaged))
    return target


def assert_refused(path: Path, offset: int) -> None:
    try:
        load_checkpoint(path)
    except CheckpointError as error:
        assert str(path) in str(error), (offset, str(error))
    else:
        raise AssertionError(f"a checkpoint with byte {offset} flipped loaded")


def test_the_file_still_reads_as_a_plain_torch_archive(small):
    raw = small.read_bytes()
    assert raw[-25:-8] == b"loopwright-crc32="
    with zipfile.ZipFile(small) as archive:
        assert archive.testzip() is None and archive.comment.startswith(b"loopwright-crc32=")
    assert torch.load(small, weights_only=True)["format"] == FORMAT
    assert load_checkpoint(small, verify=False)["loop"] == load_checkpoint(small)["loop"]


def test_every_flipped_byte_of_the_zip_headers_is_refused(small, tmp_path):
    raw = small.read_bytes()
    offsets = header_offsets(raw, small)
    assert len(offsets) > 1000
    target = tmp_path / "damaged.ckpt"
    for offset in offsets:
        assert_refused(flipped(raw, offset, target), offset)


def test_flipped_bytes_anywhere_in_the_file_are_refused(small, tmp_path):
    raw = small.read_bytes()
    target = tmp_path / "damaged.ckpt"
    for offset in sorted(random.Random(0).sample(range(len(raw)), 400)) + [0, 1, len(raw) - 1]:
        assert_refused(flipped(raw, offset, target), offset)


def test_a_truncated_or_extended_file_is_refused(small, tmp_path):
    raw = small.read_bytes()
    target = tmp_path / "damaged.ckpt"
    for data in (raw[:-1], raw[:-30], raw + b"\x00", raw[: len(raw) // 2]):
        target.write_bytes(data)
        assert_refused(target, len(data))


# ---------------------------------------------------------------- files without the checksum
STATE: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION, "w": torch.arange(6.0), "loop": {"epoch": 1}}


@pytest.fixture
def plain(tmp_path) -> Path:
    path = tmp_path / "plain.ckpt"
    torch.save(STATE, path)  # what an older version wrote: no whole-file checksum
    assert load_checkpoint(path)["loop"] == {"epoch": 1}
    return path


def _central_entry(raw: bytes, name: bytes) -> int:
    """Where the central directory's record of the entry ending in `name` starts."""
    return raw.rindex(b"PK\x01\x02", 0, raw.rindex(name))  # the directory follows the local headers


@pytest.mark.parametrize(("field", "offset"), [("version needed to extract", 6), ("compression method", 10), ("flags", 8)])
def test_a_damaged_zip_field_is_a_checkpoint_error_not_a_zipfile_exception(plain, tmp_path, field, offset):
    raw = plain.read_bytes()
    entry = _central_entry(raw, b"data.pkl")
    damaged = bytearray(raw)
    damaged[entry + offset] ^= 0x55  # zipfile: NotImplementedError("zip file version ...") and the like
    target = tmp_path / "damaged.ckpt"
    target.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError, match="truncated or corrupt") as caught:
        load_checkpoint(target)
    assert str(target) in str(caught.value), field


def test_without_the_checksum_a_flipped_byte_never_loads_other_numbers(plain, tmp_path):
    raw = plain.read_bytes()
    target = tmp_path / "damaged.ckpt"
    for offset in range(len(raw)):
        try:
            state = load_checkpoint(flipped(raw, offset, target))
        except CheckpointError as error:
            assert str(target) in str(error)
            continue
        # Fields no reader uses (times, the local copy of a size...): the same contents.
        assert torch.equal(state["w"], STATE["w"]) and state["loop"] == STATE["loop"], offset


@pytest.mark.parametrize("error", [MemoryError, KeyboardInterrupt])
def test_memory_errors_and_interrupts_are_not_disguised(small, monkeypatch, error):
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error()

    monkeypatch.setattr(checkpoint_module.torch, "load", fail)
    with pytest.raises(error):
        load_checkpoint(small)
