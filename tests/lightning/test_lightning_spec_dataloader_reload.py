"""When the loader hooks are called, as Lightning's own tests specify it (tests_pytorch/trainer/
test_dataloaders.py: test_dataloaders_load_only_once*, test_dataloaders_load_every_n_epochs_*,
test_dataloaders_load_every_epoch_no_sanity_check), each scenario run under Lightning and here,
with only the imports changed, and compared: the order of `train_dataloader()`/`val_dataloader()`/
`test_dataloader()` with and without a sanity check, and which epochs call them again under
`reload_dataloaders_every_n_epochs` with `check_val_every_n_epoch` or `val_check_interval`, with
the weights those loaders (drawn at random, shuffled) train to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader
from trainer import Trainer
from trainer.demos.boring_classes import BoringModel, RandomDataset

QUIET = dict(enable_progress_bar=False, enable_model_summary=False)


from tests.helpers.lightning_spec import weights


def load_order(root, sanity):
    """Lightning: test_dataloaders_load_only_once, test_dataloaders_load_only_once_no_sanity_check,
    test_dataloaders_load_every_epoch_no_sanity_check."""
    calls = []

    class Model(BoringModel):
        def train_dataloader(self):
            calls.append(("train", self.current_epoch))
            return super().train_dataloader()

        def val_dataloader(self):
            calls.append(("val", self.current_epoch))
            return super().val_dataloader()

        def test_dataloader(self):
            calls.append(("test", self.current_epoch))
            return super().test_dataloader()

    out = {}
    for reload in (0, 1):
        calls.clear()
        trainer = Trainer(default_root_dir=root, limit_train_batches=2, limit_val_batches=2, max_epochs=2,
                          num_sanity_val_steps=sanity, reload_dataloaders_every_n_epochs=reload, logger=False,
                          enable_checkpointing=False, **QUIET)
        model = Model()
        trainer.fit(model)
        trainer.test(model, verbose=False)
        out[reload] = list(calls)
    return out


def reload_every_n(root, num_sanity_val_steps, check_val_every_n_epoch, reload_every):
    """Lightning: test_dataloaders_load_every_n_epochs_infrequent_val (the epochs of every
    `val_dataloader()` call, the sanity check's included)."""
    log = {"train_loader": [], "val_loader": [], "sanity_step": [], "val_step": []}

    class TestModel(BoringModel):
        def train_dataloader(self):
            log["train_loader"].append(self.current_epoch)
            return DataLoader(RandomDataset(32, 4), batch_size=2, shuffle=True)

        def val_dataloader(self):
            log["val_loader"].append(self.current_epoch)
            return DataLoader(RandomDataset(32, 4), batch_size=2)

        def validation_step(self, *args, **kwargs):
            log["sanity_step" if self.trainer.sanity_checking else "val_step"].append(self.current_epoch)
            return super().validation_step(*args, **kwargs)

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, limit_train_batches=1, limit_val_batches=1,
                      check_val_every_n_epoch=check_val_every_n_epoch, reload_dataloaders_every_n_epochs=reload_every,
                      max_epochs=6, num_sanity_val_steps=num_sanity_val_steps, logger=False,
                      enable_checkpointing=False, **QUIET)
    trainer.fit(model)
    log["weights"] = weights(model)
    return log


def reload_frequent_val(root):
    """Lightning: test_dataloaders_load_every_n_epochs_frequent_val."""
    log = {"train": [], "val": [], "val_end": [], "test": 0}

    class TestModel(BoringModel):
        def train_dataloader(self):
            log["train"].append(self.current_epoch)
            return DataLoader(RandomDataset(32, 20), batch_size=2)

        def val_dataloader(self):
            log["val"].append(self.current_epoch)
            return DataLoader(RandomDataset(32, 20), batch_size=2)

        def test_dataloader(self):
            log["test"] += 1
            return DataLoader(RandomDataset(32, 4), batch_size=2)

        def on_validation_epoch_end(self):
            log["val_end"].append(self.current_epoch)

    torch.manual_seed(0)
    model = TestModel()
    trainer = Trainer(default_root_dir=root, limit_train_batches=0.3, limit_val_batches=0.3, val_check_interval=0.3,
                      reload_dataloaders_every_n_epochs=1, max_epochs=2, logger=False, enable_checkpointing=False,
                      **QUIET)
    trainer.fit(model)
    trainer.test(model, verbose=False)
    log["weights"] = weights(model)
    return log
'''

SPEC = Spec(SOURCE, "spec_dataloader_reload")


@pytest.mark.parametrize("sanity", [0, 2])
def test_loader_hooks_order(sanity: int, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("load_order", tmp_path, sanity=sanity)
    assert ours == theirs


@pytest.mark.parametrize("sanity,every,reload", [(0, 1, 2), (1, 3, 4), (1, 2, 1)])
def test_reload_every_n_epochs(sanity: int, every: int, reload: int, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reload_every_n", tmp_path, num_sanity_val_steps=sanity,
                                check_val_every_n_epoch=every, reload_every=reload)
    assert ours == theirs


def test_reload_with_frequent_validation(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("reload_frequent_val", tmp_path)
    assert ours == theirs
