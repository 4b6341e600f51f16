"""`trainer.demos.boring_classes` trains as Lightning's `lightning.pytorch.demos.boring_classes`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer import Trainer
from trainer.demos.boring_classes import BoringDataModule, BoringModel, DemoModel, ManualOptimBoringModel, RandomDictDataset

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def _run(framework: str, name: str, tmp_path: Path) -> torch.nn.Module:
    if framework == "lightning":
        lightning = pytest.importorskip("lightning")
        from lightning.pytorch.demos import boring_classes as classes

        make = lambda **kw: lightning.pytorch.Trainer(default_root_dir=tmp_path, accelerator="cpu", **kw)  # noqa: E731
    else:
        from trainer.demos import boring_classes as classes  # type: ignore[no-redef]

        make = Trainer  # type: ignore[assignment]
    torch.manual_seed(0)
    model = getattr(classes, name)()
    trainer = make(max_epochs=2, limit_train_batches=10, limit_val_batches=4, num_sanity_val_steps=0, **QUIET)
    if name == "BoringModel":
        trainer.fit(model, datamodule=classes.BoringDataModule())
    elif name == "DemoModel":
        trainer.fit(model, torch.utils.data.DataLoader(classes.RandomDataset(32, 16), batch_size=4))
    else:
        trainer.fit(model)
    return model


@pytest.mark.parametrize("name", ["BoringModel", "ManualOptimBoringModel", "DemoModel"])
def test_the_demo_classes_train_to_lightnings_weights(name, tmp_path):
    ours = _run("ours", name, tmp_path)
    assert not torch.equal(ours.state_dict()[next(iter(ours.state_dict()))], _fresh(name).state_dict()[next(iter(ours.state_dict()))])
    theirs = _run("lightning", name, tmp_path)
    for (key, mine), other in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert torch.equal(mine, other), key


def _fresh(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return {"BoringModel": BoringModel, "ManualOptimBoringModel": ManualOptimBoringModel, "DemoModel": DemoModel}[name]()


def test_the_datamodule_splits_and_the_dict_dataset():
    torch.manual_seed(0)
    data = BoringDataModule()
    data.setup("fit")
    assert len(data.train_dataloader()) == len(data.val_dataloader()) == 64
    assert not hasattr(data, "random_test")
    item = RandomDictDataset(32, 4)[1]
    assert torch.equal(item["b"], item["a"] + 2)
