"""GradientAccumulationScheduler (same weights as Lightning's) and OnExceptionCheckpoint."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from callbacks import GradientAccumulationScheduler, OnExceptionCheckpoint
from trainer import Trainer
from trainer.checkpoint import load_checkpoint

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import GradientAccumulationScheduler


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def run(root):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 3), torch.randn(48, 1))
    model = Net()
    steps = []

    class Steps(L.Callback):
        def on_train_epoch_end(self, trainer, module):
            steps.append((trainer.global_step, trainer.accumulate_grad_batches))

    trainer = L.Trainer(max_epochs=4, callbacks=[GradientAccumulationScheduler({1: 2, 3: 3}), Steps()], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(root))
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    return model.state_dict(), steps
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from callbacks import GradientAccumulationScheduler":
               "from lightning.pytorch.callbacks import GradientAccumulationScheduler"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def test_scheduled_accumulation_reaches_lightnings_weights(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    ours = _load(PROJECT, "acc_ours").run(tmp_path / "ours")
    theirs = _load("\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines()), "acc_theirs").run(tmp_path / "l")
    assert ours[1] == theirs[1] == [(12, 1), (18, 2), (24, 2), (28, 3)]
    for key in ours[0]:
        assert torch.equal(ours[0][key], theirs[0][key]), key


def test_schedule_rules() -> None:
    schedule = GradientAccumulationScheduler({2: 4})
    assert schedule.scheduling == {0: 1, 2: 4} and schedule.going_to_accumulate_grad_batches()
    assert [schedule.get_accumulate_grad_batches(e) for e in range(4)] == [1, 1, 4, 4]
    for bad in ({}, {-1: 2}, {0: 0}):
        with pytest.raises(ValueError, match="scheduling"):
            GradientAccumulationScheduler(bad)


def _failing_module(where: str) -> Any:
    from tests.helpers.reference import TinyNet

    class Failing(TinyNet):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if where == "step" and self.global_step == 2:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            if where == "batch_end" and self.global_step == 2:
                raise RuntimeError("boom")

    return Failing()


def _fail(tmp_path: Path, where: str) -> OnExceptionCheckpoint:
    from tests.helpers.reference import make_data

    callback = OnExceptionCheckpoint(tmp_path / "crash")
    trainer = Trainer(max_epochs=1, callbacks=[callback], logger=False, enable_progress_bar=False,
                      enable_checkpointing=False, device="cpu")
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(_failing_module(where), DataLoader(make_data(16), batch_size=4))
    return callback


def test_on_exception_checkpoint_writes_the_file_and_keeps_the_error(tmp_path: Path) -> None:
    callback = _fail(tmp_path, "batch_end")
    assert callback.ckpt_path == str(tmp_path / "crash" / "on_exception.ckpt")
    assert load_checkpoint(callback.ckpt_path)["global_step"] == 2


def test_on_exception_checkpoint_after_a_failing_training_step(tmp_path: Path) -> None:
    callback = _fail(tmp_path, "step")
    assert load_checkpoint(callback.ckpt_path)["global_step"] == 2
