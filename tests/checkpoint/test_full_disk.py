"""A checkpoint write that runs out of disk space says so (ENOSPC) and names the file, also when
torch.save hides the write's errno ("unexpected pos") and when the write runs in the background.

The full disk is simulated two ways: the checkpoint file's own `write` raising
OSError(ENOSPC) past a byte budget, as the filesystem does (always run), and a real 1 MiB
tmpfs (only where the tests run as root and may mount one)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer.checkpoint.format as checkpoint_format
from tests.helpers.checkpoints import shuffled
from tests.helpers.reference import TinyNet, make_data
from trainer import Trainer


class FullFile:
    """A file opened for writing on a disk with `budget` bytes left: past them, `write` raises ENOSPC."""

    def __init__(self, handle: Any, budget: int) -> None:
        self._handle, self._left = handle, budget

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if size > self._left:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= size
        return int(self._handle.write(data))

    def __enter__(self) -> FullFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    real = open

    def opening(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real(file, mode, *args, **kwargs)
        return FullFile(handle, budget=2048) if "w" in mode else handle

    monkeypatch.setattr(checkpoint_format, "open", opening, raising=False)


def _fit(root: Path, asynchronous: bool) -> tuple[Trainer, BaseException]:
    run = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                  root_dir=root, async_checkpointing=asynchronous)
    with pytest.raises(OSError) as caught:
        torch.manual_seed(0)
        run.fit(TinyNet(), shuffled(make_data()))
    return run, caught.value


def _says_the_disk_is_full(error: BaseException, path: Path) -> None:
    text = str(error)
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC, text
    assert "the disk is full (ENOSPC)" in text and repr(str(path)) in text and "[Errno 5]" not in text, text
    assert not [p for p in path.parent.iterdir() if p.name != path.name]  # no partial temporary left


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_a_write_that_runs_out_of_space_says_the_disk_is_full_and_names_the_file(
        tmp_path: Path, full_disk: None, asynchronous: bool) -> None:
    run, error = _fit(tmp_path, asynchronous)
    _says_the_disk_is_full(error, run.log_dir / "last.ckpt")
    assert not (run.log_dir / "last.ckpt").exists()


def test_a_save_checkpoint_on_a_full_disk_says_so(tmp_path: Path, full_disk: None) -> None:
    run = Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu",
                  root_dir=tmp_path)
    run.fit(TinyNet(), shuffled(make_data()))
    target = tmp_path / "by_hand" / "model.ckpt"
    with pytest.raises(OSError) as caught:
        run.save_checkpoint(target)
    _says_the_disk_is_full(caught.value, target)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Any:
    """A real 1 MiB filesystem under tmp_path (root only; skipped where it can't be mounted)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a 1 MiB tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


class Big(TinyNet):
    """2 MB of weights: more than the tiny filesystem holds."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.zeros(500_000))


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_a_real_full_filesystem(tiny_tmpfs: Path, asynchronous: bool) -> None:
    run = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False, device="cpu",
                  root_dir=tiny_tmpfs, async_checkpointing=asynchronous)
    with pytest.raises(OSError) as caught:
        run.fit(Big(), shuffled(make_data()))
    _says_the_disk_is_full(caught.value, run.log_dir / "last.ckpt")
