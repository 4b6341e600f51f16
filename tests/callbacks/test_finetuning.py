"""BaseFinetuning / BackboneFinetuning: the same weights and parameter groups as Lightning's
(the project below runs twice: as written, and with only its imports rewritten to Lightning's)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from callbacks import BackboneFinetuning, BaseFinetuning

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
import trainer as L
from callbacks import BackboneFinetuning


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=0.1, momentum=0.9)


def run(root, epochs=4, **options):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    model = Net()
    finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1, **options)
    trainer = L.Trainer(max_epochs=epochs, callbacks=[finetuning], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root))
    trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True))
    lrs = [group["lr"] for group in trainer.optimizers[0].param_groups]
    return model.state_dict(), lrs, finetuning.state_dict()
'''

IMPORTS = {"import trainer as L": "import lightning.pytorch as L",
           "from callbacks import BackboneFinetuning": "from lightning.pytorch.callbacks import BackboneFinetuning"}


def _load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - the test's own text
    return module


def _twin() -> str:
    return "\n".join(IMPORTS.get(line, line) for line in PROJECT.splitlines())


@pytest.mark.parametrize("options", [{}, {"backbone_initial_lr": 0.05, "should_align": False}])
def test_backbone_finetuning_weights_as_lightning(tmp_path: Path, options: dict[str, Any]) -> None:
    pytest.importorskip("lightning")
    ours = _load(PROJECT, "ft_ours").run(tmp_path / "ours", **options)
    theirs = _load(_twin(), "ft_theirs").run(tmp_path / "theirs", **options)
    assert ours[1] == theirs[1] and len(ours[1]) == 2
    assert ours[0].keys() == theirs[0].keys()
    for key in ours[0]:
        assert torch.equal(ours[0][key], theirs[0][key]), key
    assert {k: ours[2][k] for k in theirs[2]} == theirs[2]  # Lightning's keys (ours adds which parameters train)
    # BatchNorm trained from the start (train_bn): the added group holds the Linear layer only
    assert ours[2]["internal_optimizer_metadata"][0][1]["params"] == ["backbone.0.weight", "backbone.0.bias"]


def test_frozen_until_the_epoch_then_trained(tmp_path: Path) -> None:
    before = _load(PROJECT, "ft_frozen").run(tmp_path, epochs=1)
    torch.manual_seed(0)
    torch.randn(32, 4), torch.randn(32, 1)  # the data `run` draws first
    fresh = _load(PROJECT, "ft_fresh").Net()
    assert torch.equal(before[0]["backbone.0.weight"], fresh.backbone[0].weight)  # frozen in epoch 0
    assert not torch.equal(before[0]["backbone.1.weight"], fresh.backbone[1].weight)  # BatchNorm trains (train_bn)
    assert before[1] == [0.1]


def test_helpers() -> None:
    block = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    BaseFinetuning.freeze(block, train_bn=False)
    assert not any(p.requires_grad for p in block.parameters()) and not block[1].track_running_stats
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    BaseFinetuning.unfreeze_and_add_param_group(block, optimizer, train_bn=False)
    assert [g["lr"] for g in optimizer.param_groups] == [1.0, 0.1] and len(optimizer.param_groups[1]["params"]) == 2
    assert all(p.requires_grad for p in block.parameters()) and block[1].track_running_stats
    with pytest.raises(NotImplementedError, match="freeze_before_training"):
        BaseFinetuning().freeze_before_training(block)


def test_a_module_without_backbone_is_refused() -> None:
    from trainer import Trainer

    module = _load(PROJECT, "ft_nobackbone").Net()
    del module.backbone
    module.backbone = None
    with pytest.raises(ValueError, match="`backbone` attribute"):
        BackboneFinetuning().on_fit_start(Trainer(logger=False), module)


def test_resume_after_unfreezing_rebuilds_the_groups(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from trainer import Trainer

    project = _load(PROJECT, "ft_resume")
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    quiet: dict[str, Any] = dict(logger=False, enable_progress_bar=False, root_dir=tmp_path)
    first = Trainer(max_epochs=2, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)], **quiet)
    first.fit(project.Net(), data)
    path = first.save_checkpoint(tmp_path / "a.ckpt")
    second = Trainer(max_epochs=3, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)], **quiet)
    second.fit(project.Net(), data, ckpt_path=path)
    assert len(second.optimizers[0].param_groups) == 2
