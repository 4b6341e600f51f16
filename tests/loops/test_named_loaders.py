"""Evaluation loaders by name (beyond Lightning): a step that declares `dataloader_name` receives
each loader's name, and what it logs is kept as `name/<loader name>`, so a per-domain validation
set reads as `val_loss/clean`, `val_loss/noisy` and a monitor can name it; a module written for
Lightning (`dataloader_idx` only) keeps Lightning's integers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from callbacks import ModelCheckpoint
from trainer import Module, Trainer

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}


def _data(n: int, seed: int, shift: float = 0.0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g) + shift
    return DataLoader(TensorDataset(x, x.sum(-1, keepdim=True)), batch_size=4)


class Named(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.calls: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return F.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch: Any, batch_idx: int, dataloader_name: str) -> None:
        self.calls.append(dataloader_name)
        self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0, dataloader_name: str | None = None) -> None:
        self.calls.append((dataloader_idx, dataloader_name))
        self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _sets() -> dict[str, DataLoader]:
    return {"clean": _data(8, 1), "noisy": _data(12, 2, shift=1.0)}


def test_the_step_receives_names_and_metrics_are_keyed_by_them() -> None:
    model = Named()
    trainer = Trainer(max_epochs=1, **QUIET)
    results = trainer.validate(model, _sets(), verbose=False)
    assert model.calls == ["clean", "clean", "noisy", "noisy", "noisy"]
    assert [list(d) for d in results] == [["val_loss/clean"], ["val_loss/noisy"]]
    with torch.no_grad():  # each name holds its own loader's mean
        for name, loader in _sets().items():
            x, y = loader.dataset.tensors
            assert results[0 if name == "clean" else 1][f"val_loss/{name}"] == pytest.approx(float(F.mse_loss(model.layer(x), y)))
    assert set(trainer.callback_metrics) == {"val_loss/clean", "val_loss/noisy"}


def test_both_arguments_come_by_keyword() -> None:
    model = Named()
    Trainer(max_epochs=1, **QUIET).test(model, _sets(), verbose=False)
    assert model.calls == [(0, "clean"), (0, "clean"), (1, "noisy"), (1, "noisy"), (1, "noisy")]


def test_a_monitor_names_the_loader(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss/noisy", filename="{epoch}", save_top_k=1)
    trainer = Trainer(max_epochs=3, logger=False, enable_progress_bar=False, callbacks=[checkpoint], root_dir=str(tmp_path),
                      num_sanity_val_steps=0)
    scores: list[float] = []

    class Watch(Named):
        def on_validation_epoch_end(self) -> None:
            scores.append(float(self.trainer.callback_metrics["val_loss/noisy"]))

    trainer.fit(Watch(), _data(16, 0), _sets())
    assert checkpoint.best_model_score is not None and float(checkpoint.best_model_score) == min(scores)
    assert Path(checkpoint.best_model_path).name == f"epoch={scores.index(min(scores))}.ckpt"


def test_a_name_without_a_default_for_one_loader_is_refused_before_any_batch() -> None:
    with pytest.raises(ValueError, match="declares `dataloader_name` without a default, but there is one val loader"):
        Trainer(max_epochs=1, **QUIET).validate(Named(), _data(8, 1))
