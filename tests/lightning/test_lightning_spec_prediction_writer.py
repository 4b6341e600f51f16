"""BasePredictionWriter as Lightning's own tests specify it
(tests_pytorch/callbacks/test_prediction_writer.py), each scenario run under Lightning and here,
with only the imports changed, and compared: which of `write_on_batch_end`/`write_on_epoch_end`
run for each `write_interval`, with and without `return_predictions`, the arguments they get
(batch indices, batch and dataloader index, the predictions), with several loaders too, and the
refused interval.

Not compared: `trainer.predict_loop.epoch_batch_indices` (Lightning's loop internals).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader
from trainer import Trainer
from callbacks import BasePredictionWriter
from trainer.demos.boring_classes import BoringModel, RandomDataset


class Writer(BasePredictionWriter):
    def __init__(self, interval):
        super().__init__(interval)
        self.batches, self.epochs = [], []

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append((prediction.detach().clone(), list(batch_indices), batch.clone(), batch_idx, dataloader_idx))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.epochs.append(([[p.detach().clone() for p in loader] for loader in predictions],
                            [[list(i) for i in loader] for loader in batch_indices]))


class Model(BoringModel):
    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch) + dataloader_idx


def intervals(root, interval="batch_and_epoch", return_predictions=True, loaders=1, batch_size=4):
    """Lightning: test_prediction_writer_hook_call_intervals, test_prediction_writer_batch_indices,
    test_batch_level_batch_indices."""
    torch.manual_seed(0)
    model = Model()
    data = [DataLoader(RandomDataset(32, 24), batch_size=batch_size) for _ in range(loaders)]
    writer = Writer(interval)
    trainer = Trainer(default_root_dir=root, logger=False, limit_predict_batches=3, callbacks=writer,
                      enable_progress_bar=False, enable_model_summary=False)
    results = trainer.predict(model, dataloaders=data[0] if loaders == 1 else data,
                              return_predictions=return_predictions)
    if results is not None:
        results = [r.detach().clone() for r in results] if loaders == 1 else [[r.detach().clone() for r in rs] for rs in results]
    return results, writer.batches, writer.epochs


def refused(root):
    """Lightning: test_prediction_writer_invalid_write_interval."""
    try:
        Writer("something")
    except Exception as error:  # Lightning's MisconfigurationException; ours a ValueError
        return "write_interval" in str(error)
    return "no error"
'''

SPEC = Spec(SOURCE, "spec_prediction_writer")


def same(ours: object, theirs: object) -> bool:
    if isinstance(ours, torch.Tensor) or isinstance(theirs, torch.Tensor):
        return isinstance(ours, torch.Tensor) and isinstance(theirs, torch.Tensor) and torch.equal(ours, theirs)
    if isinstance(ours, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    return bool(ours == theirs)


@pytest.mark.parametrize("options", [
    dict(), dict(return_predictions=False), dict(interval="batch", return_predictions=False),
    dict(interval="epoch", return_predictions=False), dict(interval="epoch"), dict(loaders=2),
], ids=["both", "both_no_return", "batch", "epoch_no_return", "epoch", "two_loaders"])
def test_prediction_writer(options: dict[str, object], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("intervals", tmp_path, **options)
    assert same(ours, theirs), (ours, theirs)


def test_refused_interval(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("refused", tmp_path)
    assert ours == theirs == True  # noqa: E712
