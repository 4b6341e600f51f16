"""`Trainer(async_checkpointing=True)`: the state is copied off the training path and written
in a background thread; the results are those of synchronous saves, a failed write surfaces
from fit, fit returns after the last write, and a kill during a write leaves the previous file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.checkpoints import shuffled, trainer
from tests.helpers.reference import make_data, make_model, weights
from trainer.checkpoint import FORMAT, FORMAT_VERSION, load_checkpoint, save_atomic
from trainer.checkpoint import writer as checkpoint_writer
from trainer.checkpoint.background import stage

ROOT = Path(__file__).resolve().parents[2]


def _fit(root: Path, **kwargs: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    model = make_model(lr=0.01)
    torch.manual_seed(1)
    run = trainer(root, max_epochs=3, run_name="exp", **kwargs)
    run.fit(model, shuffled(make_data()))
    return run, weights(model)


def _equal(a: Any, b: Any, where: str = "checkpoint") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _equal(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{index}]")
    else:
        assert a == b, where


def test_async_saves_train_and_write_what_sync_saves_do(tmp_path):
    import callbacks

    sync_run, sync_weights = _fit(tmp_path / "sync", callbacks=[callbacks.ModelCheckpoint(every_n_train_steps=7, save_top_k=2, monitor="train/mse")])
    async_run, async_weights = _fit(tmp_path / "async", async_checkpointing=True,
                                    callbacks=[callbacks.ModelCheckpoint(every_n_train_steps=7, save_top_k=2, monitor="train/mse")])
    for key in sync_weights:
        assert torch.equal(sync_weights[key], async_weights[key]), key
    assert not [t for t in threading.enumerate() if t.name.startswith("checkpoint-writer")]  # fit waited
    a, b = load_checkpoint(sync_run.log_dir / "last.ckpt"), load_checkpoint(async_run.log_dir / "last.ckpt")
    assert a["config"].pop("async_checkpointing") is False and b["config"].pop("async_checkpointing") is True
    assert a["config"].pop("root_dir") != b["config"].pop("root_dir")
    for state in (a, b):
        state.pop("_path")
        state["loop"].pop("elapsed", None)  # wall-clock time (max_time) differs from run to run
        state["callbacks"] = {k: {n: v for n, v in c.items() if n not in ("dirpath", "best_k_models", "best_model_path", "kth_best_model_path", "last_model_path")}
                              for k, c in state["callbacks"].items()}
    _equal(a, b)
    names = lambda run: sorted(p.name for p in (run.log_dir / "checkpoints").iterdir())  # noqa: E731
    assert names(sync_run) == names(async_run) and len(names(sync_run)) == 2


def test_a_staged_copy_writes_the_same_bytes_and_keeps_shared_storage(tmp_path):
    weight = torch.randn(64, 8)
    state = {"format": FORMAT, "format_version": FORMAT_VERSION, "embedding": weight, "head": weight,  # tied
             "view": weight[3:5], "steps": [torch.tensor(3), 1.5, "x"], "half": weight.half()}
    copy, before = stage(state), weight.clone()
    weight.add_(1.0)  # training goes on: the copy does not move
    save_atomic(copy, tmp_path / "staged.ckpt")
    weight.copy_(before)
    save_atomic(state, tmp_path / "direct.ckpt")
    assert (tmp_path / "staged.ckpt").read_bytes() == (tmp_path / "direct.ckpt").read_bytes()
    loaded = torch.load(tmp_path / "staged.ckpt", weights_only=True)
    assert loaded["embedding"].data_ptr() == loaded["head"].data_ptr()  # still one tensor


def test_page_locked_staging_is_exact_reused_across_saves_and_released_when_fit_ends(tmp_path, monkeypatch):
    """GPU tensors are staged in page-locked memory: registered at each storage's exact size (not
    the pinned cache's power of two, kept for the process's life), registered once and reused by
    later saves, and unlocked and dropped when fit ends. CUDA's calls are recorded stand-ins here;
    every buffer is treated as a GPU tensor's."""
    from trainer.checkpoint import background

    locked: dict[int, int] = {}
    registered: list[int] = []
    unlocked: list[int] = []

    def register(pointer: int, nbytes: int) -> bool:
        assert pointer not in locked, "a buffer page-locked twice"
        locked[pointer] = nbytes
        registered.append(nbytes)
        return True

    def unregister(pointer: int) -> None:
        assert pointer in locked, "unlocking memory that is not locked"
        unlocked.append(locked.pop(pointer))

    monkeypatch.setattr(background, "_host_register", register)
    monkeypatch.setattr(background, "_host_unregister", unregister)
    take = background.StagingPool.take
    pools: list[Any] = []

    def take_as_for_a_gpu(pool: Any, nbytes: int, pinned: bool) -> torch.UntypedStorage:
        if not any(p is pool for p in pools):
            pools.append(pool)
        return take(pool, nbytes, True)

    monkeypatch.setattr(background.StagingPool, "take", take_as_for_a_gpu)
    sizes: list[list[int]] = []
    real_stage = checkpoint_writer.stage

    def stage_and_note(state: Any, pool: Any = None) -> Any:
        staged = real_stage(state, pool)
        seen: dict[int, int] = {}

        def walk(value: Any) -> None:
            if isinstance(value, torch.Tensor):
                seen[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    walk(item)

        walk(staged)
        sizes.append(sorted(seen.values()))
        return staged

    monkeypatch.setattr(checkpoint_writer, "stage", stage_and_note)
    import callbacks

    run, _ = _fit(tmp_path, async_checkpointing=True, callbacks=[callbacks.ModelCheckpoint(every_n_train_steps=7, save_top_k=-1)])
    assert len(sizes) >= 3 and len(pools) == 1
    assert sorted(registered) == sizes[0] and all(s == sizes[0] for s in sizes)  # exact sizes, locked once, reused
    assert locked == {} and sorted(unlocked) == sorted(registered)  # all unlocked when fit ended
    assert pools[0].page_locked_bytes == 0 and pools[0]._free == {} and pools[0]._lent == []


def test_a_staging_pool_dropped_without_clear_unlocks_its_buffers(monkeypatch):
    from trainer.checkpoint import background

    unlocked: list[int] = []
    monkeypatch.setattr(background, "_host_register", lambda pointer, nbytes: True)
    monkeypatch.setattr(background, "_host_unregister", unlocked.append)
    pool = background.StagingPool()
    pointer = pool.take(4096, True).data_ptr()
    assert pool.take(0, True).nbytes() == 0 and pool.page_locked_bytes == 4096
    del pool
    import gc

    gc.collect()
    assert unlocked == [pointer]


def test_a_failure_in_the_background_write_surfaces_from_fit_and_leaves_the_previous_file(tmp_path, monkeypatch):
    real, calls = checkpoint_writer.save_atomic, []

    def second_fails(state: Any, path: Any) -> Any:
        calls.append(threading.current_thread().name)
        if len(calls) == 2:
            raise OSError(28, f"Checkpoint {str(path)!r} could not be written: the disk is full")
        return real(state, path)

    monkeypatch.setattr(checkpoint_writer, "save_atomic", second_fails)
    run = trainer(tmp_path, max_epochs=3, run_name="exp", async_checkpointing=True)
    with pytest.raises(OSError, match="the disk is full"):
        run.fit(make_model(lr=0.01), shuffled(make_data()))
    assert calls[0].startswith("checkpoint-writer")  # written off the training thread
    assert load_checkpoint(run.log_dir / "last.ckpt")["loop"]["global_step"] >= 10  # a complete earlier one


def test_fit_returns_only_after_the_last_write_is_complete(tmp_path, monkeypatch):
    real = checkpoint_writer.save_atomic

    def slow(state: Any, path: Any) -> Any:
        time.sleep(0.3)
        return real(state, path)

    monkeypatch.setattr(checkpoint_writer, "save_atomic", slow)
    run = trainer(tmp_path, max_epochs=2, run_name="exp", async_checkpointing=True)
    run.fit(make_model(lr=0.01), shuffled(make_data()))
    assert load_checkpoint(run.log_dir / "last.ckpt")["loop"]["global_step"] == 20
    assert not [t for t in threading.enumerate() if t.name.startswith("checkpoint-writer")]
    assert not [p for p in run.log_dir.iterdir() if p.name.endswith(".tmp")]


def test_modelcheckpoint_deletes_a_file_only_after_its_replacement_is_written(tmp_path, monkeypatch):
    import callbacks

    real, seen = checkpoint_writer.save_atomic, []

    def watch(state: Any, path: Any) -> Any:
        time.sleep(0.05)  # training went on meanwhile (and, without deferral, deleted the old file)
        seen.append(sorted(p.name for p in Path(path).parent.glob("*.ckpt")))  # what is there while writing
        return real(state, path)

    monkeypatch.setattr(checkpoint_writer, "save_atomic", watch)
    best = callbacks.ModelCheckpoint(every_n_train_steps=5, save_top_k=1, monitor=None)
    run = trainer(tmp_path, max_epochs=2, run_name="exp", async_checkpointing=True, enable_checkpointing=False, callbacks=[best])
    run.fit(make_model(lr=0.01), shuffled(make_data()))
    assert all(names for names in seen[1:])  # while each new file was written, the previous one was still there
    assert sorted(p.name for p in (run.log_dir / "checkpoints").iterdir()) == ["epoch=1-step=20.ckpt"]


KILLED = """
import sys, time, torch
from pathlib import Path
from tests.helpers.checkpoints import shuffled, trainer
from tests.helpers.reference import make_data, make_model
from trainer.checkpoint import format as checkpoint_format
root, marker = Path(sys.argv[1]), Path(sys.argv[2])
real = checkpoint_format._Crc32Writer.write
saves = []

def write(self, data):
    if not saves or saves[-1] is not self:
        saves.append(self)
    if len(saves) == 2:  # the second save (end of epoch 2): tell the test, then stall inside the write
        marker.touch()
        time.sleep(60)
    return real(self, data)

checkpoint_format._Crc32Writer.write = write
run = trainer(root, max_epochs=3, run_name="exp", async_checkpointing=True)
run.fit(make_model(lr=0.01), shuffled(make_data()))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_kill_during_a_background_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    script, marker = tmp_path / "train.py", tmp_path / "writing"
    script.write_text(KILLED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs"), str(marker)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    folder = tmp_path / "runs" / "default" / "exp"
    assert load_checkpoint(folder / "last.ckpt")["loop"]["global_step"] == 10  # the first save, whole
    assert len([p for p in folder.iterdir() if p.name.endswith(".tmp")]) == 1  # the cut-short one, cleared by the next save


class _Peer:
    """A rank of a two-process run, with a scripted agreement."""

    def __init__(self, rank: int, others_ok: bool = True) -> None:
        self.rank, self.world_size, self.others_ok, self.agreed = rank, 2, others_ok, []
        self.is_global_zero = rank == 0

    def all_agree(self, flag: bool) -> bool:
        self.agreed.append(flag)
        return flag and self.others_ok


def test_under_ddp_every_rank_learns_that_a_background_write_failed(tmp_path, monkeypatch):
    def full_disk(state: Any, path: Any) -> None:
        raise OSError(28, f"Checkpoint {str(path)!r} could not be written: the disk is full")

    monkeypatch.setattr(checkpoint_writer, "save_atomic", full_disk)
    state = {"format": FORMAT, "format_version": FORMAT_VERSION, "w": torch.ones(3)}
    writer, zero = checkpoint_writer.CheckpointWriter(), _Peer(rank=0)
    writer.write(state, tmp_path / "a.ckpt", zero, background=True)  # returns at once; the write fails later
    with pytest.raises(OSError, match="the disk is full"):
        writer.settle(zero, enabled=True)
    assert zero.agreed == [False]  # told the others before raising
    other, follower = checkpoint_writer.CheckpointWriter(), _Peer(rank=1, others_ok=False)
    other.write(state, tmp_path / "a.ckpt", follower, background=True)  # not rank 0: writes nothing
    with pytest.raises(RuntimeError, match="A background checkpoint write on rank 0 failed"):
        other.settle(follower, enabled=True)
    assert follower.agreed == [True] and not (tmp_path / "a.ckpt").exists()
