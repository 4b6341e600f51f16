"""`LightningModule.strict_loading = False` as Lightning honours it: `load_from_checkpoint`
without `strict=`, and `fit`/`validate` with `ckpt_path`, load what matches.

The project is written once with our imports; its Lightning twin is the same text with only the
import lines rewritten (`lightning_source`), and both run in this process.
"""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import lightning_source, load_source

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import LightningModule, Trainer, seed_everything


class Frozen(LightningModule):
    """A frozen backbone its checkpoints leave out (Lightning's own strict_loading example)."""

    def __init__(self, hidden=4, loose=True):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = torch.nn.Linear(3, hidden).requires_grad_(False)
        self.head = torch.nn.Linear(hidden, 1)
        if loose:
            self.strict_loading = False

    def state_dict(self, *args, **kwargs):
        return {k: v for k, v in super().state_dict(*args, **kwargs).items() if not k.startswith("backbone.")}

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.head.parameters(), lr=0.1, momentum=0.9)


class Wider(LightningModule):
    """A model with a layer its checkpoint lacks, and without one the checkpoint has."""

    def __init__(self, hidden=4, loose=True):
        super().__init__()
        self.backbone = torch.nn.Linear(3, hidden)
        self.extra = torch.nn.Linear(hidden, 2)
        if loose:
            self.strict_loading = False


def loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def make_trainer(root, epochs):
    return Trainer(default_root_dir=root, max_epochs=epochs, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)


def first_epoch(root):
    seed_everything(1)
    model = Frozen()
    trainer = make_trainer(root, 1)
    trainer.fit(model, loader())
    path = f"{root}/one.ckpt"
    trainer.save_checkpoint(path)
    return path


def resume(root, path):
    seed_everything(1)  # the same frozen backbone as the first run's
    model = Frozen()
    trainer = make_trainer(root, 3)
    trainer.fit(model, loader(), ckpt_path=path)
    metrics = trainer.validate(model, loader(), ckpt_path=path)
    return model, trainer, metrics
'''

def load(framework: str) -> types.ModuleType:
    return load_source(SOURCE, framework, "strict_loading")


def test_only_the_imports_differ() -> None:
    changed = [(a, b) for a, b in zip(SOURCE.split("\n"), lightning_source(SOURCE).split("\n")) if a != b]
    assert changed and all(a.startswith("from trainer import") for a, _ in changed)


def both(tmp_path: Path) -> dict[str, Any]:
    runs = {}
    for framework in ("ours", "lightning"):
        project = load(framework)
        root = tmp_path / framework
        runs[framework] = (project, project.first_epoch(str(root)), root)
    return runs


def test_fit_and_validate_with_ckpt_path_load_non_strictly_as_lightning(tmp_path: Path) -> None:
    """The checkpoint lacks the backbone: a strict load refuses it; strict_loading=False resumes
    (backbone kept, head and optimizer from the file) to Lightning's exact weights and metrics."""
    results = {}
    for framework, (project, path, root) in both(tmp_path).items():
        results[framework] = project.resume(str(root), path)
    (ours, ours_trainer, ours_metrics), (theirs, theirs_trainer, theirs_metrics) = results["ours"], results["lightning"]
    assert ours_trainer.current_epoch == theirs_trainer.current_epoch == 3
    assert ours_trainer.global_step == theirs_trainer.global_step == 12
    mine, other = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert list(mine) == list(other) == ["backbone.weight", "backbone.bias", "head.weight", "head.bias"]
    assert all(torch.equal(mine[k], other[k]) for k in mine)
    mean = lambda metrics: float((metrics[0] if isinstance(metrics, list) else metrics)["val_loss"])  # noqa: E731
    assert mean(ours_metrics) == mean(theirs_metrics)


def test_a_strict_module_refuses_the_same_checkpoint(tmp_path: Path) -> None:
    for framework, (project, path, root) in both(tmp_path).items():
        model = project.Frozen(loose=False)
        with pytest.raises(Exception, match="backbone.weight"):  # ours names the file; Lightning: torch's RuntimeError
            project.make_trainer(str(root), 2).fit(model, project.loader(), ckpt_path=path)


def test_load_from_checkpoint_follows_strict_loading_as_lightning(tmp_path: Path) -> None:
    """Without strict=: the module's strict_loading decides, with Lightning's two warnings;
    strict=False against strict_loading=True is Lightning's error; a strict module refuses."""
    for framework, (project, path, _root) in both(tmp_path).items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = project.Wider.load_from_checkpoint(path)
        said = [str(w.message) for w in caught]
        assert "Found keys that are in the model state dict but not in the checkpoint: ['backbone.weight', 'backbone.bias', 'extra.weight', 'extra.bias']" in said, framework
        assert "Found keys that are not in the model state dict but in the checkpoint: ['head.weight', 'head.bias']" in said, framework
        assert model.extra.weight.shape == (2, 4)
        with pytest.raises(RuntimeError, match="Missing key"):
            project.Wider.load_from_checkpoint(path, loose=False)
        with pytest.raises(ValueError, match="in conflict with"):
            _conflict(project, path)


def _conflict(project: types.ModuleType, path: str) -> None:
    """strict=False for a module that set strict_loading = True: Lightning's ValueError."""

    class Insisting(project.Wider):  # type: ignore[name-defined,misc]
        def __init__(self, hidden: int = 4) -> None:
            super().__init__(hidden, loose=False)
            self.strict_loading = True

    Insisting.load_from_checkpoint(path, strict=False)
