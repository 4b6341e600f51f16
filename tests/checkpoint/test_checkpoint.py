"""Checkpoint files: what they hold, and a clear error naming the file for every bad one."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.checkpoints import shuffled, trainer
from tests.helpers.reference import make_data, make_model
from trainer import Callback, Module
from trainer.checkpoint import writer as checkpoint_writer
from trainer.checkpoint import FORMAT, FORMAT_VERSION, CheckpointError, load_checkpoint, save_atomic
from trainer.distributed import Strategy


@pytest.fixture
def ckpt(tmp_path) -> Path:
    """A real checkpoint: two amp epochs, written by the Trainer at the end of fit."""
    run = trainer(tmp_path / "run", precision="amp", max_epochs=2)
    run.fit(make_model(), shuffled(make_data()))
    return run.log_dir / "last.ckpt"


def test_checkpoint_holds_the_whole_state_and_loads_weights_only(ckpt):
    state = torch.load(ckpt, weights_only=True)
    assert state["format"] == FORMAT and state["format_version"] == FORMAT_VERSION
    for key in ("module", "optimizers", "lr_schedulers", "precision", "loop", "rng", "data", "callbacks", "config", "hparams", "cut"):
        assert key in state, key
    assert state["optimizers"][0]["class"] == "SGD" and state["optimizers"][0]["state"]["state"]  # momentum buffers
    assert set(state["precision"]["state"]) >= {"scale", "growth_factor", "backoff_factor", "_growth_tracker"}
    loop = state["loop"]
    assert loop == {"epoch": 2, "global_step": 20, "batches_done": 0, "skipped_steps": loop["skipped_steps"],
                    "batches_before_epoch": 20, "elapsed": loop["elapsed"],
                    "validation_pending": False, "epoch_end_validated": False, "epoch_schedulers_stepped": False,
                    "skipped_windows": [], "lr_backoff": 1.0}
    assert 0 < loop["elapsed"] < 600
    assert set(state["rng"][0]) >= {"python", "numpy", "torch"}
    assert state["data"][0]["epoch_start"]["torch"].dtype == torch.uint8
    assert state["config"]["max_epochs"] == 2 and state["config"]["accumulate_grad_batches"] == 1


def _error(path: Path, **kwargs: Any) -> str:
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path, **kwargs)
    message = str(caught.value)
    assert str(path) in message  # every error names the file
    return message


def test_missing_file_and_directory(tmp_path):
    assert "does not exist" in _error(tmp_path / "nope.ckpt")
    assert "is a directory" in _error(tmp_path)


@pytest.mark.parametrize("keep", [0, 3, 100, -22])
def test_truncated_file(ckpt, tmp_path, keep):
    raw = ckpt.read_bytes()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(raw[:keep] if keep >= 0 else raw[:keep])
    assert "truncated or corrupt" in _error(cut)


def test_corrupt_bytes_inside_the_tensors_are_detected(ckpt, tmp_path):
    raw = bytearray(ckpt.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 16] = bytes(b ^ 0xFF for b in raw[middle:middle + 16])
    bad = tmp_path / "flipped.ckpt"
    bad.write_bytes(bytes(raw))
    # torch.load alone would return silently wrong numbers here; the CRC check refuses.
    assert "truncated or corrupt" in _error(bad)


def test_random_bytes_and_a_corrupt_header(ckpt, tmp_path):
    noise = tmp_path / "noise.ckpt"
    noise.write_bytes(random.Random(0).randbytes(5000))
    assert "not a torch.save archive" in _error(noise)
    raw = bytearray(ckpt.read_bytes())
    raw[0:2] = b"XX"
    header = tmp_path / "header.ckpt"
    header.write_bytes(bytes(raw))
    assert "not a torch.save archive" in _error(header)


def test_a_torch_file_that_is_not_ours(tmp_path):
    foreign = tmp_path / "weights.pt"
    torch.save(make_model().state_dict(), foreign)
    assert "not a checkpoint of this trainer" in _error(foreign)


def test_a_newer_format_version(ckpt, tmp_path):
    state = torch.load(ckpt, weights_only=True)
    state["format_version"] = FORMAT_VERSION + 1
    newer = tmp_path / "newer.ckpt"
    torch.save(state, newer)
    message = _error(newer)
    assert f"format version {FORMAT_VERSION + 1}" in message and "Upgrade" in message


class Marker:
    """Unpickling this would create a file: the loader must refuse before that can happen."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_malicious_pickle_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.ckpt"
    torch.save({"format": FORMAT, "format_version": FORMAT_VERSION, "module": Marker(marker)}, evil)
    assert not marker.exists()
    message = _error(evil)
    assert "refused without running" in message
    with pytest.raises(CheckpointError):  # through fit as well
        trainer(tmp_path / "run", max_epochs=1).fit(make_model(), shuffled(make_data()), ckpt_path=evil)
    assert not marker.exists()


class Wider(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
        self.extra = torch.nn.Linear(2, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_checkpoint_of_another_model_lists_every_mismatch(ckpt, tmp_path):
    with pytest.raises(CheckpointError) as caught:
        trainer(tmp_path / "run", max_epochs=3).fit(Wider(), shuffled(make_data()), ckpt_path=ckpt)
    message = str(caught.value)
    assert str(ckpt) in message and "TinyNet" in message
    assert "missing: extra.bias, extra.weight" in message
    assert "net.0.weight: checkpoint (16, 6) vs model (32, 6)" in message and "net.3.weight" in message
    with pytest.raises(CheckpointError, match="unexpected: .*extra.weight"):
        trainer(tmp_path / "other").validate(make_model(), shuffled(make_data()), ckpt_path=_wider_checkpoint(tmp_path))


def _wider_checkpoint(tmp_path: Path) -> Path:
    run = trainer(tmp_path / "wider", max_steps=1)
    run.fit(Wider(), shuffled(make_data()))
    state = torch.load(run.log_dir / "last.ckpt", weights_only=True)
    state["module"] = {k: v for k, v in state["module"].items() if not k.startswith("net.0")} | {
        "net.0.weight": torch.zeros(16, 6), "net.0.bias": torch.zeros(16)}
    path = tmp_path / "wider.ckpt"
    save_atomic(state, path)
    return path


def test_precision_change_amp_to_bf16_warns_that_the_scaler_is_dropped(ckpt, tmp_path):
    run = trainer(tmp_path / "bf16", precision="bf16", max_epochs=3)
    with pytest.warns(UserWarning, match="GradScaler state .* is dropped") as caught:
        run.fit(make_model(), shuffled(make_data()), ckpt_path=ckpt)
    assert str(ckpt) in str(caught[0].message) and "'amp'" in str(caught[0].message)
    assert run.global_step == 30


def test_ckpt_path_last(tmp_path, caplog):
    caplog.set_level("INFO", logger="trainer")
    first = trainer(tmp_path, max_epochs=1)
    first.fit(make_model(), shuffled(make_data()), ckpt_path="last")  # nothing yet: starts fresh, with a note
    assert first.global_step == 10 and "has no checkpoint yet, so the run starts from the beginning" in caplog.text
    run = trainer(tmp_path, max_epochs=2)
    run.fit(make_model(), shuffled(make_data()), ckpt_path="last")
    assert run.global_step == 20  # continued from step 10, not from scratch
    assert run.log_dir == first.log_dir  # ...in the folder of the run it continues
    with pytest.raises(CheckpointError, match="has no complete checkpoint to evaluate"):
        trainer(tmp_path / "empty").validate(make_model(), shuffled(make_data()), ckpt_path="last")


def test_a_failed_save_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "x.ckpt"
    save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION, "v": torch.ones(3)}, path)
    with pytest.raises(Exception):
        save_atomic({"format": FORMAT, "v": lambda: None}, path)  # not picklable: fails mid-save
    assert torch.equal(load_checkpoint(path)["v"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["x.ckpt"]
    stale = tmp_path / ".x.ckpt.999999.tmp"
    stale.write_bytes(b"half a file")
    save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION}, path)
    assert not stale.exists()


class Counter(Callback):
    def __init__(self) -> None:
        self.seen = 0

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        self.seen += 1

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = state["seen"]


def test_callback_states_round_trip_even_with_two_of_a_kind(tmp_path):
    a, b = Counter(), Counter()
    b.seen = 100
    run = trainer(tmp_path / "a", max_epochs=1, callbacks=[a, b])
    run.fit(make_model(), shuffled(make_data()))
    state = torch.load(run.log_dir / "last.ckpt", weights_only=True)
    assert state["callbacks"] == {"Counter": {"seen": 10}, "Counter#2": {"seen": 110}}
    c, d = Counter(), Counter()
    trainer(tmp_path / "b", max_epochs=2, callbacks=[c, d]).fit(
        make_model(), shuffled(make_data()), ckpt_path=run.log_dir / "last.ckpt")
    assert (c.seen, d.seen) == (20, 120)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporary_cleanup_touches_only_dead_saves_of_the_same_target(tmp_path):
    path = tmp_path / "best[1]*.ckpt"  # glob metacharacters in the name are taken literally
    dead, live = _dead_pid(), os.getppid()
    stale = tmp_path / f".best[1]*.ckpt.{dead}.tmp"
    in_flight = tmp_path / f".best[1]*.ckpt.{live}.tmp"  # another process still writing this target
    other_target = tmp_path / f".best1x.ckpt.{dead}.tmp"  # matched by the unescaped glob
    users = tmp_path / ".best[1]*.ckpt.notes.tmp"
    for file in (stale, in_flight, other_target, users):
        file.write_bytes(b"x")
    save_atomic({"format": FORMAT, "format_version": FORMAT_VERSION}, path)
    assert not stale.exists()
    assert in_flight.exists() and other_target.exists() and users.exists()
    assert load_checkpoint(path)["format"] == FORMAT


class _Peer(Strategy):
    """A one-process stand-in for a rank of a two-process run, with a scripted agreement."""

    def __init__(self, rank: int, others_ok: bool = True) -> None:
        super().__init__("cpu")
        self.rank, self.world_size, self.others_ok, self.agreed = rank, 2, others_ok, []

    def all_agree(self, flag: bool) -> bool:
        self.agreed.append(flag)
        return flag and self.others_ok


def test_a_failed_write_on_rank_zero_fails_every_rank_instead_of_hanging(tmp_path, monkeypatch):
    run = trainer(tmp_path / "run", max_steps=1, enable_checkpointing=False)
    run.fit(make_model(), shuffled(make_data()))
    target = tmp_path / "x.ckpt"
    run.strategy = follower = _Peer(rank=1, others_ok=False)  # rank 0's write failed
    with pytest.raises(RuntimeError, match=re.escape(f"Checkpoint {str(target)!r} could not be written on rank 0")):
        run.save_checkpoint(target)
    assert follower.agreed == [True] and not target.exists()
    run.strategy = writer = _Peer(rank=0)

    def full_disk(state: Any, path: Any) -> None:
        raise OSError(f"No space left on device: {path}")

    monkeypatch.setattr(checkpoint_writer, "save_atomic", full_disk)
    with pytest.raises(OSError, match="No space"):
        run.save_checkpoint(target)
    assert writer.agreed == [False]  # the other ranks learnt of it before the error was raised


def test_resuming_with_another_number_of_processes_warns_it_is_not_exact(ckpt, tmp_path):
    state = torch.load(ckpt, weights_only=True)
    state["rng"], state["data"] = state["rng"] * 2, state["data"] * 2  # as written by two ranks
    two = save_atomic(state, tmp_path / "two_ranks.ckpt")
    run = trainer(tmp_path / "one", precision="amp", max_epochs=3)
    with pytest.warns(UserWarning, match=r"written by 2 process\(es\); this run has 1") as caught:
        run.fit(make_model(), shuffled(make_data()), ckpt_path=two)
    assert str(two) in str(caught[0].message) and run.global_step == 30
