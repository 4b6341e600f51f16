"""Timer: stops at the same step as Lightning's under a clock that only the training steps move,
keeps Lightning's state, and counts the resumed run's time."""

from __future__ import annotations

import time
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from callbacks import Timer

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import Timer

CLOCK = [1000.0]


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        CLOCK[0] += 1.0  # every training batch "takes" one second
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run(root, duration, interval="step", epochs=5, ckpt_path=None, save=None):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    model = Net()
    timer = Timer(duration=duration, interval=interval, verbose=False)
    trainer = L.Trainer(max_epochs=epochs, callbacks=[timer], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root))
    trainer.fit(model, DataLoader(data, batch_size=8), ckpt_path=ckpt_path)
    if save is not None:
        trainer.save_checkpoint(save)
    return trainer.global_step, trainer.current_epoch, timer.state_dict(), model.state_dict()
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from callbacks import Timer": "from lightning.pytorch.callbacks import Timer"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin() -> str:
    return "\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines())


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    return clock


def _run(source: str, name: str, clock: list[float], *args: Any, **kwargs: Any) -> Any:
    module = _load(source, name)
    module.CLOCK = clock
    return module.run(*args, **kwargs)


@pytest.mark.parametrize(("duration", "interval"), [("00:00:00:06", "step"), ({"seconds": 6}, "epoch"),
                                                     (timedelta(0), "step")])
def test_stops_where_lightning_stops(tmp_path: Path, fake_clock: list[float], duration: Any, interval: str) -> None:
    pytest.importorskip("lightning")
    ours = _run(PROJECT, "timer_ours", fake_clock, tmp_path / "ours", duration, interval)
    fake_clock[0] = 1000.0
    theirs = _run(_twin(), "timer_theirs", fake_clock, tmp_path / "theirs", duration, interval)
    assert (ours[0], ours[2]) == (theirs[0], theirs[2])  # current_epoch after a stop inside an epoch is the Trainer's
    for key in ours[3]:
        assert torch.equal(ours[3][key], theirs[3][key]), key
    expected = {"step": 6, "epoch": 8}.get(interval) if duration != timedelta(0) else 0
    assert ours[0] == expected


def test_resume_counts_the_time_already_trained(tmp_path: Path, fake_clock: list[float]) -> None:
    first = _run(PROJECT, "timer_first", fake_clock, tmp_path, "00:00:00:06", save=tmp_path / "a.ckpt")
    assert first[0] == 6 and first[2]["time_elapsed"]["train"] == 6.0
    # 10 seconds allowed in all: 6 were used, so the resumed run takes 4 more steps
    second = _run(PROJECT, "timer_second", fake_clock, tmp_path, "00:00:00:10", epochs=9,
                  ckpt_path=tmp_path / "a.ckpt")
    assert second[0] == 10
    assert second[2]["time_elapsed"]["train"] == 10.0


def test_queries_and_validation(fake_clock: list[float]) -> None:
    timer = Timer(duration={"minutes": 1})
    assert timer.time_elapsed() == 0 and timer.time_remaining() == 60.0 and timer.start_time("train") is None
    timer.on_train_start(None, None)  # type: ignore[arg-type]
    fake_clock[0] += 15
    assert timer.time_elapsed("train") == 15 and timer.time_remaining() == 45
    timer.on_train_end(None, None)  # type: ignore[arg-type]
    fake_clock[0] += 100
    assert timer.time_elapsed() == 15 and timer.end_time() == 1015.0
    assert Timer().time_remaining() is None
    with pytest.raises(ValueError, match="DD:HH:MM:SS"):
        Timer(duration="1:2")
    with pytest.raises(ValueError, match="'step' or 'epoch'"):
        Timer(interval="batch")
    with pytest.raises(ValueError, match="unknown stage"):
        timer.time_elapsed("training_loop")
