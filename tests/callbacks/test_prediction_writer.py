"""BasePredictionWriter: written when Lightning writes, with the same predictions and batch indices
(read from `trainer.predict_dataloaders`' BatchSampler)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from callbacks import BasePredictionWriter

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import BasePredictionWriter


class Writer(BasePredictionWriter):
    def __init__(self, write_interval):
        super().__init__(write_interval)
        self.calls = []

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.calls.append(("batch", prediction, list(batch_indices or []), batch_idx, dataloader_idx))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.calls.append(("epoch", list(predictions), batch_indices))


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def predict_step(self, batch, batch_idx):
        return {"y": self.layer(batch[0]), "x": batch[0]}


def run(interval, shuffle=False, return_predictions=None):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(10, 4))
    writer = Writer(interval)
    trainer = L.Trainer(callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False)
    out = trainer.predict(Net(), DataLoader(data, batch_size=4, shuffle=shuffle), return_predictions=return_predictions)
    return writer.calls, out
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from callbacks import BasePredictionWriter":
               "from lightning.pytorch.callbacks import BasePredictionWriter"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin() -> str:
    return "\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines())


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _without_indices(calls: list[Any]) -> list[Any]:
    return [(c[0], c[1], *c[3:]) if c[0] == "batch" else (c[0], c[1]) for c in calls]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
@pytest.mark.parametrize("return_predictions", [None, False])
def test_writes_what_lightning_writes(interval: str, return_predictions: bool | None) -> None:
    pytest.importorskip("lightning")
    ours, ours_out = _load(PROJECT, "pw_ours").run(interval, return_predictions=return_predictions)
    theirs, theirs_out = _load(_twin(), "pw_theirs").run(interval, return_predictions=return_predictions)
    assert [c[0] for c in ours] == [c[0] for c in theirs]
    assert _equal(_without_indices(ours), _without_indices(theirs))
    assert _equal(ours_out, theirs_out)
    assert len(ours) == {"batch": 3, "epoch": 1, "batch_and_epoch": 4}[interval]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("interval", ["batch", "batch_and_epoch"])
def test_batch_indices_as_lightning(interval: str) -> None:
    pytest.importorskip("lightning")
    ours, _ = _load(PROJECT, "pw_idx_ours").run(interval, shuffle=True)
    assert len(ours[0][2]) == 4
    theirs, _ = _load(_twin(), "pw_idx_theirs").run(interval, shuffle=True)
    assert _equal(ours, theirs)


def test_indices_recorded_from_the_loader_and_the_sampler_restored() -> None:
    """The hooks in the order a predict pass calls them, on a shuffled loader."""
    torch.manual_seed(1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(10.0)), batch_size=4, shuffle=True)
    sampler = loader.batch_sampler.sampler  # type: ignore[union-attr]
    seen: list[Any] = []

    class Writer(BasePredictionWriter):
        def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                               batch_idx: int, dataloader_idx: int) -> None:
            seen.append(("batch", list(batch_indices), batch[0].long().tolist()))

        def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
            seen.append(("epoch", len(predictions), batch_indices))

    writer = Writer("batch_and_epoch")
    trainer: Any = types.SimpleNamespace(predict_dataloaders=loader)
    writer.on_predict_epoch_start(trainer, None)
    for batch_idx, batch in enumerate(loader):
        writer.on_predict_batch_end(trainer, None, batch[0] * 2, batch, batch_idx)
    writer.on_predict_epoch_end(trainer, None)
    writer.on_predict_end(trainer, None)
    batches = [s for s in seen if s[0] == "batch"]
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    assert all(b[1] == b[2] for b in batches)  # the dataset holds its own index
    assert sorted(i for b in batches for i in b[1]) == list(range(10))
    assert seen[-1] == ("epoch", 3, [[b[1] for b in batches]])
    assert loader.batch_sampler.sampler is sampler  # type: ignore[union-attr]


def test_without_a_batch_sampler_indices_are_empty() -> None:
    class Writer(BasePredictionWriter):
        def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
            self.got = (predictions, batch_indices)

    writer = Writer("epoch")
    trainer: Any = types.SimpleNamespace(predict_dataloaders=[torch.ones(2)])
    with pytest.warns(UserWarning, match="couldn't infer the batch indices"):
        writer.on_predict_epoch_start(trainer, None)
    writer.on_predict_batch_end(trainer, None, torch.ones(2), torch.ones(2), 0)
    writer.on_predict_epoch_end(trainer, None)
    assert len(writer.got[0]) == 1 and writer.got[1] == [[]]
    with pytest.raises(ValueError, match="write_interval"):
        BasePredictionWriter("step")
    with pytest.raises(NotImplementedError, match="write_on_batch_end"):
        BasePredictionWriter().on_predict_batch_end(trainer, None, 1, 1, 0)
