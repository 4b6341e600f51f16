"""Training from several sources against Lightning, in one process: the `combined_training`
project (a labelled and a shorter, shuffled unlabelled loader, dropout) trained with
`CombinedLoader` in each of Lightning's training modes, and with a plain dict of loaders,
reaches Lightning's weights having seen the same samples in the same batches; `len` and the
batch structure are Lightning's; `sequential` is refused in fit and read one loader after the
other in evaluation, as Lightning does. Then what only this Trainer promises: a checkpoint
written inside a combined epoch, also after a shorter loader started again, resumes to the
weights of the run that never stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.lightning_projects import assert_same_weights, both, load_project, load_source

pytest.importorskip("lightning")


@pytest.mark.parametrize("mode", ["max_size_cycle", "min_size", "max_size", None])
def test_each_training_mode_trains_to_lightnings_weights(mode: str | None, tmp_path: Path) -> None:
    ours, theirs = both("combined_training", tmp_path, mode=mode)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["seen"] == theirs["seen"]  # the same samples of each source, step by step
    assert ours["batches"] == theirs["batches"] == {"min_size": 5}.get(mode or "", 7)
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert ours["train_dataloader"] == theirs["train_dataloader"] == "dict"  # trainer.train_dataloader: the loaders given
    if mode == "max_size":
        assert [unlabelled for _, _, unlabelled in ours["seen"][5:7]] == [None, None]  # ran out: None, as Lightning's
    if mode in ("max_size_cycle", None):  # the shorter source ran out within the epoch and started again
        unlabelled = [i for _, _, batch in ours["seen"][:7] for i in batch]
        assert set(unlabelled) == set(range(18)) and len(unlabelled) > 18


def _tiny_loaders() -> dict[str, DataLoader]:
    return {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5),
            "c": [DataLoader(range(3), batch_size=2)]}


@pytest.mark.parametrize("mode", ["min_size", "max_size_cycle", "max_size", "sequential"])
def test_the_loader_yields_lightnings_items_and_length(mode: str) -> None:
    from lightning.pytorch.utilities.combined_loader import CombinedLoader as Theirs

    from trainer.utilities import CombinedLoader
    from trainer.utilities.combined_loader import CombinedLoader as AtLightningsPath

    assert AtLightningsPath is CombinedLoader
    for limits in (None, [1, 2, 1]):
        ours, theirs = CombinedLoader(_tiny_loaders(), mode), Theirs(_tiny_loaders(), mode)
        ours.limits = theirs.limits = limits
        iter(theirs)
        assert len(ours) == len(theirs)
        assert [repr(item) for item in ours] == [repr(item) for item in theirs]
    with pytest.raises(ValueError, match="is not a mode. Expected one of 'min_size'"):
        CombinedLoader(_tiny_loaders(), "longest")


_SEQUENTIAL_PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from trainer.utilities import CombinedLoader


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self.log("val_loss", self.layer(batch[0]).pow(2).mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n, seed):
    return DataLoader(TensorDataset(torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))), batch_size=4)


def main(root, fit_sequential=False):
    torch.manual_seed(0)
    model = Net()
    trainer = L.Trainer(max_epochs=1, default_root_dir=root, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    if fit_sequential:
        trainer.fit(model, CombinedLoader([data(8, 1), data(8, 2)], "sequential"))
    return trainer.validate(model, CombinedLoader({"x": data(8, 3), "y": data(6, 4)}, "sequential"), verbose=False)
'''


def test_sequential_is_refused_in_fit_and_read_loader_by_loader_in_evaluation(tmp_path: Path) -> None:
    ours, theirs = (load_source(_SEQUENTIAL_PROJECT, framework, "sequential") for framework in ("ours", "lightning"))
    results = ours.main(tmp_path / "ours")
    assert results == theirs.main(tmp_path / "theirs")
    assert [list(d) for d in results] == [["val_loss/dataloader_idx_0"], ["val_loss/dataloader_idx_1"]]
    with pytest.raises(ValueError, match="sequential"):
        theirs.main(tmp_path / "theirs", fit_sequential=True)
    with pytest.raises(ValueError, match="mode='sequential', which training does not support"):
        ours.main(tmp_path / "ours", fit_sequential=True)


# ----------------------------------------------------------------------------- resume
def _save_at(step: int, path: Path) -> Any:
    from trainer import Callback

    class Save(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step == step:
                trainer.save_checkpoint(path)

    return Save()


@pytest.mark.parametrize(("mode", "step"), [("max_size_cycle", 9), ("max_size_cycle", 13), ("max_size", 13),
                                            ("min_size", 7), ("max_size_cycle", 7)])
def test_a_checkpoint_inside_a_combined_epoch_resumes_exactly(mode: str, step: int, tmp_path: Path) -> None:
    """Step 13 is batch 6 of the second epoch: the unlabelled loader (5 batches) started again
    at batch 5, so its new order must come back too; step 7 ends the first epoch."""
    saved = tmp_path / "mid.ckpt"
    whole = load_project("combined_training", "ours").main(tmp_path / "whole", mode=mode, callbacks=[_save_at(step, saved)])
    assert saved.exists()
    resumed = load_project("combined_training", "ours").main(tmp_path / "resumed", mode=mode, ckpt_path=str(saved))
    assert_same_weights(resumed["model"], whole["model"])
    assert resumed["seen"] == whole["seen"][len(whole["seen"]) - len(resumed["seen"]):]
    assert 0 < len(resumed["seen"]) < len(whole["seen"])


_COMBINED_EVAL_PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from trainer.utilities import CombinedLoader


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen = []

    def validation_step(self, batch, batch_idx):
        self.seen.append((batch_idx, sorted(batch), None if batch["b"] is None else batch["b"][0].shape[0]))
        self.log("val_loss", self.layer(batch["a"][0]).pow(2).mean())


def main(root, mode, limit):
    torch.manual_seed(0)
    def data(n, seed):
        return DataLoader(TensorDataset(torch.randn(n, 3, generator=torch.Generator().manual_seed(seed))), batch_size=4)
    net = Net()
    trainer = L.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=limit)
    results = trainer.validate(net, CombinedLoader({"a": data(12, 1), "b": data(6, 2)}, mode), verbose=False)
    return results[0], net.seen
'''


@pytest.mark.parametrize("mode", ["max_size_cycle", "min_size", "max_size"])
@pytest.mark.parametrize("limit", [1.0, 2])
def test_a_combined_loader_in_evaluation_gives_lightnings_combined_batches(mode: str, limit: float, tmp_path: Path) -> None:
    ours, theirs = (load_source(_COMBINED_EVAL_PROJECT, framework, "combined_eval").main(tmp_path / framework, mode, limit)
                    for framework in ("ours", "lightning"))
    assert ours[1] == theirs[1] and len(ours[1]) == {"min_size": 2}.get(mode, 3 if limit == 1.0 else 2)
    assert dict(ours[0]) == theirs[0]
