"""Data as Lightning feeds it, with only the imports changed.

A DataModule whose train loader changes each epoch (`reload_dataloaders_every_n_epochs`,
`limit_train_batches`, `check_val_every_n_epoch`), predict with a BasePredictionWriter and
`LightningDataModule.from_datasets`; a DataModule's `setup(stage)` through
fit/validate/test/predict; several loaders in one stage (not supported: xfail); a user's
DistributedSampler told the epoch on one device. Weights are compared with `torch.equal`,
the steps, epochs and metrics exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, both, run

pytest.importorskip("lightning")

PRECISIONS = ["32-true", "bf16-mixed"]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_datamodule_reload_and_predict(precision: str, tmp_path: Path) -> None:
    """A DataModule whose train loader changes each epoch (reload_dataloaders_every_n_epochs=1,
    a batch size growing with `trainer.current_epoch`), limit_train_batches=0.5,
    check_val_every_n_epoch=2, a sanity check; then predict with a BasePredictionWriter, and
    test through `LightningDataModule.from_datasets`."""
    ours, theirs = run("datamodule_predict", "ours", tmp_path, precision), run("datamodule_predict", "lightning", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert all(torch.equal(a, b) for a, b in zip(ours["predictions"], theirs["predictions"], strict=True))
    assert [(i, idx) for i, idx, _ in ours["written"]] == [(i, idx) for i, idx, _ in theirs["written"]]
    assert torch.equal(ours["loaded"]["predictions"], theirs["loaded"]["predictions"])
    stages = {"TrainerFn.FITTING": "fit", "TrainerFn.PREDICTING": "predict"}  # Lightning passes an enum

    def calls(result: dict[str, Any]) -> list[str]:  # val_dataloader: ours at each reload, Lightning's lazily
        named = [call.split(":")[0] + ":" + stages.get(call.split(":", 1)[1], call.split(":", 1)[1]) if ":" in call else call
                 for call in result["calls"]]
        return [call for call in named if call != "val_dataloader"]

    assert calls(ours) == calls(theirs)
    assert [c for c in calls(ours) if c.startswith("train_dataloader")] == [f"train_dataloader:{e}" for e in range(4)]


def test_reload_without_the_extra_draw_would_differ(tmp_path: Path) -> None:
    """The comparison can fail: Lightning opens a reloaded train loader twice (one seed drawn
    more); without reloading, both draw once per epoch and still agree."""
    ours = run("datamodule_predict", "ours", tmp_path, reload_dataloaders_every_n_epochs=0)
    theirs = run("datamodule_predict", "lightning", tmp_path, reload_dataloaders_every_n_epochs=0)
    assert_same_run(ours, theirs)
    reloaded = run("datamodule_predict", "ours", tmp_path / "again")
    assert not torch.equal(reloaded["model"].net[0].weight, ours["model"].net[0].weight)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_datamodule_stages(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("datamodule_stages", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["validate"], theirs["validate"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert all(torch.equal(a, b) for a, b in zip(ours["predictions"], theirs["predictions"], strict=True))
    # both pass the TrainerFn member (a str enum: str() shows "TrainerFn.FITTING" on Python 3.11+)
    names = {"TrainerFn.FITTING": "fit", "TrainerFn.VALIDATING": "validate", "TrainerFn.TESTING": "test",
             "TrainerFn.PREDICTING": "predict"}
    assert ours["stages"] == theirs["stages"]
    assert [names.get(s, s) for s in theirs["stages"]] == ["fit", "validate", "test", "predict"]
    assert ours["hparams"] == theirs["hparams"] and ours["dm_hparams"] == theirs["dm_hparams"]


@pytest.mark.parametrize("loaders", ["eval", "train", "predict"])
def test_multiple_loaders(loaders: str, tmp_path: Path) -> None:
    ours, theirs = both("multi_loaders", tmp_path, loaders=loaders)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours.get("seen") == theirs.get("seen")
    if loaders == "eval":
        assert_same_metrics(ours["val"], theirs["val"])  # val_mse/dataloader_idx_0, ..._1
        assert [dict(d) for d in ours["test"]] == theirs["test"]
    if loaders == "predict":
        assert all(torch.equal(a, b) for pa, pb in zip(ours["predictions"], theirs["predictions"], strict=True)
                   for a, b in zip(pa, pb, strict=True))


def _sampled_orders(module_base: type, trainer_class: type, **quiet: Any) -> list[list[float]]:
    """The sample order of each epoch of a one-process run whose loader has a user-made
    DistributedSampler (shuffle=True)."""
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    class Recorder(module_base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list[list[float]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.seen.append(batch[0].flatten().tolist())
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.arange(8.0).view(8, 1))
    model = Recorder()
    trainer_class(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, **quiet).fit(model, DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=1, rank=0)))
    return model.seen


def test_a_distributed_sampler_is_told_the_epoch_on_one_device_too() -> None:
    """Lightning calls `set_epoch` on the train loader's sampler every epoch whatever the
    strategy, so a DistributedSampler made by the user reshuffles on one device as well."""
    import lightning

    import trainer as ours

    theirs = _sampled_orders(lightning.LightningModule, lightning.Trainer, accelerator="cpu", devices=1)
    mine = _sampled_orders(ours.Module, ours.Trainer, device="cpu")
    assert mine == theirs and len({tuple(order) for order in mine}) == 3  # three different orders
