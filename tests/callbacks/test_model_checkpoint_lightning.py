"""`callbacks.ModelCheckpoint` against Lightning's own, in one process.

One small project is written with this package's imports; its Lightning twin is the same
text with only the import lines rewritten. Both train on the same seed and data for a grid
of `ModelCheckpoint` and Trainer settings, and must leave the same files in `dirpath`, the
same best / kth best file and score, and in every file the same `epoch`, `global_step` and
weights (`torch.equal`).

Metric names have no `/` (ours write `_` where Lightning makes a subfolder, docs/lightning.md).
"""

from __future__ import annotations

import logging
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("lightning")

PROJECT = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import Callback, LightningModule, Trainer, seed_everything
from callbacks import ModelCheckpoint


class Net(LightningModule):
    def __init__(self, nudge_in_hook=False):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.nudge_in_hook = nudge_in_hook

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.nudge_in_hook:  # after the callbacks' hook, so in neither framework's file
            with torch.no_grad():
                self.layer.bias.add_(1.0)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))
        self.log("val_score", torch.tensor(((self.trainer.global_step * 7) % 11) / 10))  # not monotonic

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Nudge(Callback):
    """Changes the weights after every batch (as an EMA or weight-averaging callback does)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with torch.no_grad():
            pl_module.layer.weight.mul_(0.99)


def run(root, trainer_kwargs, checkpoint_kwargs, nudge=None):
    seed_everything(0)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 4, generator=generator), torch.randn(40, 1, generator=generator)
    train = DataLoader(TensorDataset(x, y), batch_size=4)
    val = DataLoader(TensorDataset(x[:12], y[:12]), batch_size=4)
    checkpoint = ModelCheckpoint(dirpath=root + "/ck", **checkpoint_kwargs)
    callbacks = {"before": [Nudge(), checkpoint], "after": [checkpoint, Nudge()]}.get(nudge, [checkpoint])
    trainer = Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      accelerator="cpu", num_sanity_val_steps=0, callbacks=callbacks, **trainer_kwargs)
    trainer.fit(Net(nudge_in_hook=nudge == "module"), train, val)
    return checkpoint
'''

IMPORTS = {
    "from trainer import Callback, LightningModule, Trainer, seed_everything":
        "from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything",
    "from callbacks import ModelCheckpoint": "from lightning.pytorch.callbacks import ModelCheckpoint",
}


def project(lightning: bool) -> types.ModuleType:
    """The project as a module: ours, or Lightning's twin (only the import lines rewritten)."""
    name = "mc_project_lightning" if lightning else "mc_project_ours"
    if name in sys.modules:
        return sys.modules[name]
    source = PROJECT
    for ours, theirs in IMPORTS.items():
        assert ours in source
        if lightning:
            source = source.replace(ours, theirs)
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def outcome(checkpoint: Any, root: Path) -> dict[str, Any]:
    folder = root / "ck"
    files = sorted(os.listdir(folder)) if folder.is_dir() else []
    saved = {}
    for name in files:
        state = torch.load(folder / name, map_location="cpu", weights_only=False)
        saved[name] = (state["epoch"], state["global_step"], state["state_dict"])
    score = checkpoint.best_model_score
    return {
        "files": files,
        "best": os.path.basename(checkpoint.best_model_path),
        "score": None if score is None else float(score),
        "kth": os.path.basename(checkpoint.kth_best_model_path),
        "last": os.path.basename(checkpoint.last_model_path),
        "saved": saved,
    }


def both(tmp_path: Path, trainer_kwargs: dict[str, Any], checkpoint_kwargs: dict[str, Any],
         nudge: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    results = []
    for lightning in (False, True):
        root = tmp_path / ("lightning" if lightning else "ours")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            checkpoint = project(lightning).run(str(root), trainer_kwargs, checkpoint_kwargs, nudge)
        results.append(outcome(checkpoint, root))
    return results[0], results[1]


def assert_same(ours: dict[str, Any], theirs: dict[str, Any], epoch_after_fit: tuple[str, ...] = ()) -> None:
    assert ours["files"] == theirs["files"]
    assert (ours["best"], ours["kth"], ours["last"]) == (theirs["best"], theirs["kth"], theirs["last"])
    assert (ours["score"] is None) == (theirs["score"] is None)
    if theirs["score"] is not None:
        assert ours["score"] == pytest.approx(theirs["score"], rel=1e-6)
    for name, (epoch, step, weights) in theirs["saved"].items():
        our_epoch, our_step, our_weights = ours["saved"][name]
        # A file written once fit counted its last epoch: Lightning's `epoch` is the next one (docs/checkpoints.md).
        assert (our_epoch + (name in epoch_after_fit), our_step) == (epoch, step), name
        assert our_weights.keys() == weights.keys()
        for key in weights:
            assert torch.equal(our_weights[key], weights[key]), (name, key)


GRID: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"max_epochs": 3}, {}),
    ({"max_epochs": 3}, {"save_top_k": -1, "save_last": True}),
    ({"max_epochs": 4}, {"monitor": "val_score", "save_top_k": 2}),
    ({"max_epochs": 4}, {"monitor": "val_score", "mode": "max", "save_top_k": -1}),
    ({"max_epochs": 4}, {"monitor": "val_loss", "save_top_k": 1, "save_last": True, "filename": "{epoch}-{val_loss:.3f}"}),
    ({"max_epochs": 4}, {"every_n_epochs": 2, "save_top_k": -1}),
    ({"max_epochs": 4, "check_val_every_n_epoch": 2}, {"monitor": "val_score", "save_top_k": 2}),
    ({"max_epochs": 2}, {"every_n_train_steps": 3}),
    ({"max_epochs": 2}, {"every_n_train_steps": 3, "save_top_k": -1, "save_last": True}),
    ({"max_epochs": 2}, {"every_n_train_steps": 4, "monitor": "val_score", "save_top_k": 2}),
    ({"max_epochs": 2}, {"every_n_train_steps": 3, "filename": "{step}-{val_loss:.2f}", "save_top_k": -1}),
    ({"max_epochs": 2, "accumulate_grad_batches": 2}, {"every_n_train_steps": 2, "save_top_k": -1}),
    ({"max_epochs": 2, "accumulate_grad_batches": 2, "val_check_interval": 0.2},
     {"monitor": "val_loss", "save_top_k": -1, "filename": "{epoch}-{val_loss:.4f}"}),
    ({"max_epochs": 2, "val_check_interval": 0.5}, {"monitor": "val_score", "save_top_k": 2}),
    ({"max_epochs": 2, "val_check_interval": 0.5}, {"save_top_k": -1, "save_on_train_epoch_end": True}),
    ({"max_epochs": 2, "val_check_interval": 0.5}, {"every_n_train_steps": 5, "monitor": "val_score", "save_top_k": -1}),
    ({"max_epochs": 2, "val_check_interval": 5}, {"monitor": "val_score", "save_top_k": 2, "save_last": True}),
    ({"max_epochs": 2, "val_check_interval": 4, "check_val_every_n_epoch": None},
     {"monitor": "val_score", "mode": "max", "save_top_k": 2}),
    ({"max_epochs": 2}, {"save_top_k": -1, "save_on_train_epoch_end": False, "save_last": True}),
    ({"max_steps": 13}, {"every_n_train_steps": 5, "save_top_k": -1, "save_last": True}),
    ({"max_epochs": 3}, {"filename": "fixed", "save_top_k": -1}),
    ({"max_epochs": 3}, {"filename": "fixed", "monitor": "val_score", "save_top_k": -1}),
    ({"max_epochs": 3}, {"filename": "fixed", "monitor": "val_score", "save_top_k": -1, "enable_version_counter": False}),
]


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    noisy = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric", "trainer")]
    levels = [logger.level for logger in noisy]
    for logger in noisy:
        logger.setLevel(logging.ERROR)
    yield
    for logger, level in zip(noisy, levels):
        logger.setLevel(level)


@pytest.mark.parametrize("trainer_kwargs,checkpoint_kwargs", GRID, ids=[f"{t}-{c}" for t, c in GRID])
def test_same_files_as_lightning(tmp_path, trainer_kwargs, checkpoint_kwargs):
    ours, theirs = both(tmp_path, trainer_kwargs, checkpoint_kwargs)
    assert theirs["files"], "the case saves something"
    assert_same(ours, theirs)


@pytest.mark.parametrize("checkpoint_kwargs", [
    {"save_top_k": -1, "save_last": True},
    {"monitor": "val_score", "save_top_k": 2, "save_last": True},
    {"every_n_train_steps": 4, "save_last": True},
])
def test_a_second_run_into_the_same_folder(tmp_path, checkpoint_kwargs):
    """The files of an earlier run stay; the new ones get Lightning's -v1 names (last.ckpt included)."""
    results = []
    for lightning in (False, True):
        root = tmp_path / ("lightning" if lightning else "ours")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                checkpoint = project(lightning).run(str(root), {"max_epochs": 2}, checkpoint_kwargs)
        results.append(outcome(checkpoint, root))
    ours, theirs = results
    assert any("-v1" in name for name in theirs["files"])
    assert_same(ours, theirs)


@pytest.mark.parametrize("checkpoint_kwargs", [{"save_top_k": 0, "save_last": True}, {"every_n_epochs": 0, "save_last": True}])
def test_last_written_when_training_ends(tmp_path, checkpoint_kwargs):
    """Nothing else saved: Lightning writes last.ckpt when training ends, after counting the epoch."""
    ours, theirs = both(tmp_path, {"max_epochs": 3}, {"monitor": "val_score", **checkpoint_kwargs})
    assert theirs["files"] == ["last.ckpt"]
    assert_same(ours, theirs, epoch_after_fit=("last.ckpt",))


@pytest.mark.parametrize("nudge", ["before", "module"])
def test_step_files_hold_what_the_other_batch_end_hooks_did(tmp_path, nudge):
    """A step save comes after the callbacks listed before ModelCheckpoint, and before the module's own hook."""
    ours, theirs = both(tmp_path, {"max_epochs": 1}, {"every_n_train_steps": 3, "save_top_k": -1}, nudge)
    assert theirs["files"] == ["epoch=0-step=3.ckpt", "epoch=0-step=6.ckpt", "epoch=0-step=9.ckpt"]
    assert_same(ours, theirs)


def test_step_files_hold_what_a_later_listed_callback_did(tmp_path):
    ours, theirs = both(tmp_path, {"max_epochs": 1}, {"every_n_train_steps": 3, "save_top_k": -1}, "after")
    assert_same(ours, theirs)


def test_fraction_that_does_not_divide_the_epoch(tmp_path):
    ours, theirs = both(tmp_path, {"max_epochs": 2, "val_check_interval": 0.4}, {"monitor": "val_loss", "save_top_k": -1})
    assert_same(ours, theirs)
