"""State that `on_train_epoch_start` resets survives a resume inside an epoch.

PyTorch's `word_language_model` pattern: the module resets its recurrent state when an
epoch starts, carries it (detached) from batch to batch, and keeps it in the checkpoint with
`on_save_checkpoint`/`on_load_checkpoint`. A resume inside an epoch runs the epoch-start
hooks again (callbacks find their per-epoch state), then the checkpoint's restore once more,
so the restored state wins: the weights are `torch.equal` to the uninterrupted run's,
whether the first run stopped at max_steps, on SIGTERM or the file came from
`ModelCheckpoint(every_n_train_steps=...)`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import callbacks
from tests.helpers.checkpoints import scramble_global_rng, shuffled, trainer
from tests.helpers.reference import assert_same_weights, make_data
from trainer import Callback, Module
from trainer.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
BATCH, HIDDEN = 4, 8
PER_EPOCH = 10  # 40 samples in batches of 4
STOP = PER_EPOCH + 4  # 4 batches into epoch 1


class Carried(Module):
    """A GRU cell whose hidden state runs through the epoch, reset in on_train_epoch_start."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.GRUCell(6, HIDDEN)
        self.drop = torch.nn.Dropout(0.2)
        self.head = torch.nn.Linear(HIDDEN, 1)
        self.hidden: torch.Tensor | None = None
        self.epoch_starts = 0

    def on_train_epoch_start(self) -> None:
        self.hidden = torch.zeros(BATCH, HIDDEN)
        self.epoch_starts += 1

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        assert self.hidden is not None
        self.hidden = self.cell(self.drop(x), self.hidden.detach())  # truncated backpropagation
        return torch.nn.functional.mse_loss(self.head(self.drop(self.hidden)), y)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["hidden"] = None if self.hidden is None else self.hidden.detach().clone()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.hidden = checkpoint["hidden"]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def new_model(seed: int = 0) -> Carried:
    torch.manual_seed(seed)
    return Carried()


def loader() -> Any:
    return shuffled(make_data(BATCH * PER_EPOCH), batch_size=BATCH)


class EpochTally(Callback):
    """Per-epoch state built in on_train_epoch_start (with a random draw), used for every
    batch and kept in the checkpoint; `finished` records each epoch's. (It counts at
    on_train_batch_start: ModelCheckpoint's step saves happen before on_train_batch_end.)"""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.scale = 0.0
        self.finished: list[tuple[int, list[int], float]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.seen, self.scale = [], float(torch.rand(()))

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(batch_idx)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.finished.append((trainer.current_epoch, list(self.seen), self.scale))

    def state_dict(self) -> dict[str, Any]:
        return {"seen": list(self.seen), "scale": self.scale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen, self.scale = list(state["seen"]), float(state["scale"])


class EpochBuffer(Callback):
    """Per-epoch state that is not in the checkpoint: it must exist after a resume."""

    def __init__(self) -> None:
        self.buffer: list[int] | None = None
        self.finished: list[list[int]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.buffer = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        assert self.buffer is not None, "on_train_epoch_start did not run before the batches"
        self.buffer.append(batch_idx)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        assert self.buffer is not None
        self.finished.append(list(self.buffer))


def uninterrupted(tmp_path: Path, extra: tuple[Callback, ...] = ()) -> tuple[Carried, EpochTally]:
    model, tally = new_model(), EpochTally()
    torch.manual_seed(1)
    trainer(tmp_path / "full", max_epochs=3, callbacks=[tally, *extra]).fit(model, loader())
    return model, tally


def resume(path: Path, tmp_path: Path) -> tuple[Carried, EpochTally, EpochBuffer]:
    scramble_global_rng()
    model, tally, buffer = new_model(seed=99), EpochTally(), EpochBuffer()
    trainer(tmp_path / "resumed", max_epochs=3, callbacks=[tally, buffer]).fit(model, loader(), ckpt_path=path)
    return model, tally, buffer


def check_resumed(reference: Carried, tally: EpochTally, path: Path, tmp_path: Path) -> None:
    saved = load_checkpoint(path)
    assert saved["loop"]["epoch"] == 1 and saved["loop"]["batches_done"] == 4 and saved["cut"]["clean"]
    assert saved["hidden"] is not None and saved["hidden"].abs().sum() > 0  # not the reset state
    resumed, resumed_tally, buffer = resume(path, tmp_path)
    assert resumed.epoch_starts == 2  # the resumed epoch's hook ran again, and the next epoch's
    assert_same_weights(reference, resumed)
    assert resumed.hidden is not None and torch.equal(resumed.hidden, reference.hidden)
    # The callback's per-epoch state (built with a random draw) is the uninterrupted run's.
    assert resumed_tally.finished == tally.finished[1:]
    assert resumed_tally.finished[0][1] == list(range(PER_EPOCH))
    # State a callback builds in on_train_epoch_start but doesn't save exists after a resume.
    assert buffer.finished == [list(range(4, PER_EPOCH)), list(range(PER_EPOCH))]


def test_stopped_by_max_steps(tmp_path: Path) -> None:
    reference, tally = uninterrupted(tmp_path)
    model = new_model()
    torch.manual_seed(1)
    first = trainer(tmp_path / "first", max_epochs=3, max_steps=STOP, callbacks=[EpochTally()])
    first.fit(model, loader())
    check_resumed(reference, tally, first.log_dir / "last.ckpt", tmp_path)


def test_from_a_model_checkpoint_every_n_train_steps_file(tmp_path: Path) -> None:
    every = callbacks.ModelCheckpoint(dirpath=tmp_path / "every", every_n_train_steps=7, save_top_k=-1)
    reference, tally = uninterrupted(tmp_path, (every,))
    [path] = [p for p in (tmp_path / "every").glob("*.ckpt") if load_checkpoint(p)["loop"]["global_step"] == STOP]
    check_resumed(reference, tally, path, tmp_path)


SCRIPT = """
import sys, time, torch
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.helpers.checkpoints import trainer
from tests.checkpoint.test_resume_epoch_state import EpochTally, loader, new_model
from trainer import Callback
torch.set_num_threads({threads})
handshake = Path({handshake!r})

class Handshake(Callback):
    # Inside step {stop} tell the parent, then hold the step until its SIGTERM has arrived.
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == {stop} - 1:
            handshake.touch()
            deadline = time.monotonic() + 60
            while not trainer.should_stop and time.monotonic() < deadline:
                time.sleep(0.01)

model = new_model()
torch.manual_seed(1)
run = trainer(Path({root_dir!r}), max_epochs=3, callbacks=[EpochTally(), Handshake()])
run.fit(model, loader())
print("global_step", run.global_step)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_stopped_by_sigterm(tmp_path: Path) -> None:
    reference, tally = uninterrupted(tmp_path)
    script, handshake = tmp_path / "train.py", tmp_path / "inside_step"
    script.write_text(SCRIPT.format(root=str(ROOT), threads=torch.get_num_threads(), handshake=str(handshake),
                                    stop=STOP, root_dir=str(tmp_path / "first")))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    child = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not handshake.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the child never reached the step"
            time.sleep(0.01)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert f"global_step {STOP}" in out
    [last] = (tmp_path / "first").glob("**/last.ckpt")
    check_resumed(reference, tally, last, tmp_path)


def test_without_the_second_restore_the_reset_state_would_win(tmp_path: Path) -> None:
    """The hook order on a resume inside an epoch: the epoch-start hooks, then the
    checkpoint's restore again (its on_load_checkpoint sees the state they reset)."""
    first = trainer(tmp_path / "first", max_epochs=3, max_steps=STOP)
    first.fit(new_model(), loader())
    seen: list[tuple[str, bool]] = []

    class Watch(Carried):
        def on_train_epoch_start(self) -> None:
            super().on_train_epoch_start()
            seen.append(("on_train_epoch_start", True))

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            reset = self.hidden is not None and not self.hidden.any()
            seen.append(("on_load_checkpoint", reset))
            super().on_load_checkpoint(checkpoint)

    torch.manual_seed(0)
    model = Watch()
    trainer(tmp_path / "resumed", max_steps=STOP + 1).fit(model, loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert seen == [("on_load_checkpoint", False), ("on_train_epoch_start", True), ("on_load_checkpoint", True)]


def test_an_epoch_boundary_resume_restores_once(tmp_path: Path) -> None:
    first = trainer(tmp_path / "first", max_epochs=1)
    first.fit(new_model(), loader())
    calls: list[str] = []

    class Count(Carried):
        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            calls.append("load")
            super().on_load_checkpoint(checkpoint)

    torch.manual_seed(0)
    run = trainer(tmp_path / "resumed", max_epochs=3)
    run.fit(Count(), loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert calls == ["load"]
    assert run._run.checkpoints._resumed_inside_epoch is None  # the checkpoint dict is not kept


def test_the_checkpoint_is_let_go_when_fit_ends_before_the_epoch(tmp_path: Path) -> None:
    first = trainer(tmp_path / "first", max_epochs=3, max_steps=STOP)
    first.fit(new_model(), loader())
    run = trainer(tmp_path / "resumed", max_epochs=3, max_steps=STOP)  # already reached: no epoch runs
    run.fit(new_model(), loader(), ckpt_path=first.log_dir / "last.ckpt")
    assert run._run.checkpoints._resumed_inside_epoch is None
