"""Running the same command again continues the run: `ckpt_path="last"` (fresh with a note the
first time; the newest complete checkpoint of the run after that, falling back past a damaged
one), the run's folder found again (`run_name`, SLURM's job id, or the run it resumes) with
TensorBoard's curves continued, and `keep_last_checkpoints`.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.checkpoints import fresh_model, scramble_global_rng, shuffled, trainer
from tests.helpers.reference import make_data, make_model, weights
from trainer import Callback, Trainer
from trainer.checkpoint import CheckpointError, load_checkpoint
from trainer.loggers import TensorBoardLogger

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

SLURM_AND_LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SLURM_") or name in SLURM_AND_LAUNCH:
            monkeypatch.delenv(name)


class StopAt(Callback):
    """SIGTERM to this process inside optimizer step `step` (the run finishes it, writes last.ckpt, returns)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step - 1:
            os.kill(os.getpid(), signal.SIGTERM)


def _uninterrupted(tmp_path: Path, epochs: int) -> dict[str, torch.Tensor]:
    model = make_model(lr=0.01)
    torch.manual_seed(1)
    trainer(tmp_path / "full", max_epochs=epochs).fit(model, shuffled(make_data()))
    return weights(model)


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ------------------------------------------------------------------ ckpt_path="last"
def test_a_first_launch_with_last_starts_fresh_with_a_note_and_the_rerun_continues(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="trainer")
    model = make_model(lr=0.01)
    torch.manual_seed(1)
    first = trainer(tmp_path, max_epochs=1, run_name="exp")
    first.fit(model, shuffled(make_data()), ckpt_path="last")
    assert first.global_step == 10 and first.log_dir == tmp_path / "default" / "exp"
    assert f"ckpt_path='last': run {str(tmp_path / 'default' / 'exp')!r} has no checkpoint yet" in caplog.text

    scramble_global_rng()
    resumed_model = fresh_model(lr=0.01)
    again = trainer(tmp_path, max_epochs=3, run_name="exp")
    again.fit(resumed_model, shuffled(make_data()), ckpt_path="last")
    assert again.global_step == 30 and again.log_dir == first.log_dir
    _assert_equal(weights(resumed_model), _uninterrupted(tmp_path, 3))


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one_with_a_warning_naming_both(tmp_path):
    model = make_model(lr=0.01)
    torch.manual_seed(1)
    trainer(tmp_path, max_epochs=2, run_name="exp", keep_last_checkpoints=2).fit(model, shuffled(make_data()))
    folder = tmp_path / "default" / "exp"
    newest, previous = folder / "last.ckpt", folder / "last-step=10.ckpt"
    assert load_checkpoint(newest)["loop"]["global_step"] == 20 and load_checkpoint(previous)["loop"]["global_step"] == 10
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # killed mid-copy, a full disk...

    scramble_global_rng()
    model = fresh_model(lr=0.01)
    run = trainer(tmp_path, max_epochs=3, run_name="exp", keep_last_checkpoints=2)
    with pytest.warns(UserWarning, match="is damaged") as caught:
        run.fit(model, shuffled(make_data()), ckpt_path="last")
    message = str(caught[0].message)
    assert f"the newest checkpoint of run {str(folder)!r}, {str(newest)!r}, is damaged" in message
    assert f"resuming from the previous complete one, {str(previous)!r} (optimizer step 10)" in message
    assert run.global_step == 30  # steps 11-20 trained again, then the third epoch
    _assert_equal(weights(model), _uninterrupted(tmp_path, 3))


def test_a_flipped_byte_in_the_newest_falls_back_too_and_weights_only_files_are_never_picked(tmp_path):
    import callbacks

    keep = callbacks.ModelCheckpoint(save_weights_only=True, save_top_k=1)
    model = make_model(lr=0.01)
    torch.manual_seed(1)
    trainer(tmp_path, max_epochs=2, run_name="exp", keep_last_checkpoints=2, callbacks=[keep]).fit(model, shuffled(make_data()))
    folder = tmp_path / "default" / "exp"
    assert list((folder / "checkpoints").glob("*.ckpt"))  # weights only: written after last.ckpt, never resumed
    data = bytearray((folder / "last.ckpt").read_bytes())
    data[len(data) // 3] ^= 0xFF
    (folder / "last.ckpt").write_bytes(bytes(data))
    run = trainer(tmp_path, max_epochs=3, run_name="exp")
    with pytest.warns(UserWarning, match=r"CRC-32 .* resuming from the previous complete one, .*last-step=10.ckpt"):
        run.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert run.global_step == 30


def test_when_every_checkpoint_of_the_run_is_damaged_it_says_so_instead_of_starting_over(tmp_path):
    trainer(tmp_path, max_epochs=1, run_name="exp").fit(make_model(lr=0.01), shuffled(make_data()))
    last = tmp_path / "default" / "exp" / "last.ckpt"
    last.write_bytes(b"PK\x03\x04 not much")
    with pytest.raises(CheckpointError, match=r"every checkpoint of run .* is damaged, so there is nothing to resume from") as raised:
        trainer(tmp_path, max_epochs=2, run_name="exp").fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert str(last) in str(raised.value)


def test_keep_last_checkpoints_keeps_the_newest_k(tmp_path):
    run = trainer(tmp_path, max_epochs=5, run_name="exp", keep_last_checkpoints=3)
    run.fit(make_model(lr=0.01), shuffled(make_data()))
    folder = tmp_path / "default" / "exp"
    assert sorted(p.name for p in folder.iterdir()) == ["last-step=30.ckpt", "last-step=40.ckpt", "last.ckpt"]
    for name, step in (("last.ckpt", 50), ("last-step=40.ckpt", 40), ("last-step=30.ckpt", 30)):
        assert load_checkpoint(folder / name)["loop"]["global_step"] == step
    default = trainer(tmp_path, max_epochs=2, run_name="one")  # k = 1: last.ckpt alone, as before
    default.fit(make_model(lr=0.01), shuffled(make_data()))
    assert [p.name for p in default.log_dir.iterdir()] == ["last.ckpt"]
    with pytest.raises(ValueError, match=r"Trainer\(keep_last_checkpoints=...\)"):
        Trainer(keep_last_checkpoints=0, logger=False)


# ------------------------------------------------------------------ the run's folder
def test_a_rerun_lands_in_the_same_folder_and_tensorboard_steps_have_no_gap_or_duplicate(tmp_path):
    def run(*callbacks: Callback) -> Trainer:
        scramble_global_rng()
        result = trainer(tmp_path, logger=True, run_name="exp", max_epochs=2, log_every_n_steps=1, callbacks=list(callbacks))
        result.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
        return result

    first = run(StopAt(6))
    assert first.global_step == 6
    second = run()
    assert second.global_step == 20 and second.log_dir == first.log_dir == tmp_path / "default" / "exp"
    assert [p.name for p in (tmp_path / "default").iterdir()] == ["exp"]  # not a new version_N
    # each run's events file read on its own, in the order the runs wrote them (one directory read
    # orders the files by name, which ties within a second and can then skip the first run's)
    runs = []
    for path in second.log_dir.glob("events.out.tfevents.*"):
        events = EventAccumulator(str(path))
        events.Reload()
        scalars = events.Scalars("train/loss")
        runs.append((scalars[0].wall_time, [event.step for event in scalars]))
    steps = [step for _, written in sorted(runs) for step in written]
    assert len(runs) == 2 and steps == list(range(1, 21)), steps


def test_after_a_kill_past_the_last_checkpoint_the_rerun_shows_each_step_once(tmp_path):
    from tests.helpers.checkpoints import SaveAt

    early = tmp_path / "step6.ckpt"
    first = trainer(tmp_path, logger=True, run_name="exp", max_epochs=2, log_every_n_steps=1, callbacks=[SaveAt(6, early)])
    first.fit(make_model(lr=0.01), shuffled(make_data()))
    (first.log_dir / "last.ckpt").write_bytes(early.read_bytes())  # killed after step 20, last checkpoint at step 6
    again = trainer(tmp_path, logger=True, run_name="exp", max_epochs=2, log_every_n_steps=1)
    again.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert again.global_step == 20 and again.log_dir == first.log_dir
    events = EventAccumulator(str(again.log_dir))
    events.Reload()
    assert [event.step for event in events.Scalars("train/loss")] == list(range(1, 21))  # 7-20 once, from the rerun


def test_an_unnamed_run_resumed_with_last_continues_in_its_own_folder(tmp_path):
    root = tmp_path / "runs"
    first = trainer(root, logger=True, max_epochs=1)
    first.fit(make_model(lr=0.01), shuffled(make_data()))
    other = trainer(tmp_path / "elsewhere", max_epochs=1)  # another root_dir: never looked at
    other.fit(make_model(lr=0.01), shuffled(make_data()))
    again = trainer(root, logger=True, max_epochs=2)
    again.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert again.global_step == 20 and again.log_dir == first.log_dir == root / "default" / "version_0"
    assert [p.name for p in (root / "default").iterdir()] == ["version_0"]


def test_a_named_run_resumes_its_own_checkpoints_not_a_newer_run_beside_it(tmp_path):
    trainer(tmp_path, max_epochs=1, run_name="a").fit(make_model(lr=0.01), shuffled(make_data()))
    trainer(tmp_path, max_epochs=2, run_name="b").fit(make_model(lr=0.01), shuffled(make_data()))  # newer, further
    run = trainer(tmp_path, max_epochs=2, run_name="a")
    run.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert run.global_step == 20 and run.log_dir.name == "a"
    assert load_checkpoint(tmp_path / "default" / "a" / "last.ckpt")["loop"]["global_step"] == 20


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_requeued_slurm_job_finds_its_run_by_the_job_id(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("TRAINER_REQUEUED_JOB", "")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol here: requeueing logs a warning and goes on
    first = trainer(tmp_path, logger=True, max_epochs=2, callbacks=[StopAt(4)])
    first.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert first.log_dir == tmp_path / "default" / "slurm-4242" and first.global_step == 4
    monkeypatch.setenv("SLURM_JOB_ID", "999")  # another job writes a newer run beside it
    trainer(tmp_path, max_epochs=1).fit(make_model(lr=0.01), shuffled(make_data()))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # the requeued job: the same command
    again = trainer(tmp_path, logger=True, max_epochs=2)
    again.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert again.log_dir == first.log_dir and again.global_step == 20
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == ["slurm-4242", "slurm-999"]


def test_a_fresh_start_in_a_named_folder_that_holds_a_run_says_what_it_replaces(tmp_path):
    trainer(tmp_path, max_epochs=1, run_name="exp").fit(make_model(lr=0.01), shuffled(make_data()))
    with pytest.warns(UserWarning, match=r"already holds last.ckpt \(optimizer step 10\) of an earlier run.*ckpt_path='last'"):
        trainer(tmp_path, max_epochs=1, run_name="exp").fit(make_model(lr=0.01), shuffled(make_data()))


def test_run_names_are_folder_names_and_a_logger_of_your_own_is_named_on_the_logger(tmp_path):
    for bad in ("a/b", "..", " x", 3):
        with pytest.raises(ValueError, match=r"Trainer\(run_name=...\): expected a plain folder name"):
            Trainer(run_name=bad, logger=False)
    with pytest.raises(ValueError, match=r"with a logger of your own, name the run on the logger \(TensorBoardLogger\(version=...\)\)"):
        Trainer(run_name="x", logger=TensorBoardLogger(tmp_path))
    assert TensorBoardLogger(tmp_path, version=3).log_dir == tmp_path / "default" / "version_3"
    named = TensorBoardLogger(tmp_path, name="mlp", version="exp")
    run = trainer(tmp_path, logger=named, max_epochs=1)
    run.fit(make_model(lr=0.01), shuffled(make_data()))
    again = trainer(tmp_path, logger=TensorBoardLogger(tmp_path, name="mlp", version="exp"), max_epochs=2)
    again.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert again.global_step == 20 and again.log_dir == tmp_path / "mlp" / "exp"


def test_a_named_folder_logger_or_a_list_of_them_names_the_run(tmp_path):
    from trainer.loggers import CSVLogger

    def csv() -> CSVLogger:
        return CSVLogger(tmp_path, version="exp")

    trainer(tmp_path, logger=csv(), max_epochs=1).fit(make_model(lr=0.01), shuffled(make_data()))
    trainer(tmp_path, max_epochs=2, run_name="newer").fit(make_model(lr=0.01), shuffled(make_data()))  # beside it, newer
    for logger in (csv(), [csv(), TensorBoardLogger(tmp_path, version="exp")]):
        run = trainer(tmp_path, logger=logger, max_epochs=2)
        run.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
        assert run.log_dir == tmp_path / "default" / "exp" and run.global_step == 20
