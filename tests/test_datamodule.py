"""DataModule and Lightning's loader arguments: fit(model, dm),
fit(datamodule=...), train_dataloaders=/val_dataloaders=/dataloaders=, hooks in Lightning's
order (prepare_data, setup(stage), ..., teardown(stage)), state in the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data
from trainer import DataModule, Trainer
from trainer.checkpoint import load_checkpoint
from trainer.trainer.states import TrainerFn

QUIET = dict(logger=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class Data(DataModule):
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.calls: list[str] = []
        self.resumed: dict[str, Any] | None = None

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        assert isinstance(stage, TrainerFn)  # Lightning's enum, equal to its value ("fit", "test", ...)
        self.calls.append(f"setup({stage.value})")

    def teardown(self, stage: str) -> None:
        assert isinstance(stage, TrainerFn)
        self.calls.append(f"teardown({stage.value})")

    def train_dataloader(self) -> Any:
        return DataLoader(make_data(16), batch_size=self.batch_size)

    def val_dataloader(self) -> Any:
        return DataLoader(make_data(8), batch_size=self.batch_size)

    def test_dataloader(self) -> Any:
        return DataLoader(make_data(8), batch_size=self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.resumed = state


def test_fit_with_a_datamodule_in_lightning_order(tmp_path: Path):
    data = Data()
    trainer = Trainer(max_epochs=1, root_dir=tmp_path, **QUIET)
    trainer.fit(TinyNet(), datamodule=data)
    assert data.calls == ["prepare_data", "setup(fit)", "teardown(fit)"] and trainer.datamodule is data
    assert trainer.global_step == 4 and "val/loss" in trainer.callback_metrics
    assert load_checkpoint(trainer.log_dir / "last.ckpt")["datamodule"] == {"batch_size": 4}
    assert data.hparams == {"batch_size": 4}
    again = Data()
    Trainer(max_epochs=2, **QUIET, enable_checkpointing=False).fit(TinyNet(), again, ckpt_path=trainer.log_dir / "last.ckpt")
    assert again.resumed == {"batch_size": 4}  # fit(model, dm): Lightning's positional form


def test_lightning_loader_keywords_and_evaluation(tmp_path: Path):
    trainer = Trainer(max_epochs=1, enable_checkpointing=False, **QUIET)
    trainer.fit(TinyNet(), train_dataloaders=DataLoader(make_data(8), batch_size=4), val_dataloaders=DataLoader(make_data(4)))
    assert trainer.global_step == 2
    with pytest.raises(ValueError, match=r"test\(\) runs test_step, and TinyNet has none"):  # as Lightning refuses
        trainer.test(TinyNet(), datamodule=Data())

    class Tested(TinyNet):
        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.validation_step(batch, batch_idx)

    data = Data()
    assert set(trainer.test(Tested(), datamodule=data)) == {"val/loss"}  # what its test_step logged
    assert data.calls == ["prepare_data", "setup(test)", "teardown(test)"]
    assert "val/loss" in trainer.validate(TinyNet(), dataloaders=DataLoader(make_data(4), batch_size=2))


def test_both_or_neither_is_an_error():
    with pytest.raises(ValueError, match="both loaders and a datamodule"):
        Trainer(**QUIET).fit(TinyNet(), DataLoader(make_data(8)), datamodule=Data())
    with pytest.raises(ValueError, match="Received: none of them"):
        Trainer(**QUIET).fit(TinyNet())
