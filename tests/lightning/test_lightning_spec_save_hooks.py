"""What `on_save_checkpoint` sees, as Lightning's hooks see it: for a file written at an
epoch's end (ModelCheckpoint's epoch saves, `save_last`) `current_epoch` is the epoch that
ended, the file's own `epoch`; for a step save inside an epoch, the epoch in progress. Both
packages write the same files, each holding what its hooks recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import os

import torch
from trainer import Callback, Trainer
from callbacks import ModelCheckpoint
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False)


class Model(BoringModel):
    def on_save_checkpoint(self, checkpoint):
        checkpoint["module_saw"] = (self.current_epoch, self.global_step)


class Watch(Callback):
    def on_save_checkpoint(self, trainer, module, checkpoint):
        checkpoint["callback_saw"] = (trainer.current_epoch, trainer.global_step)


def saves(root, every_n_train_steps):
    torch.manual_seed(0)
    checkpoint = ModelCheckpoint(dirpath=root / "ck", save_top_k=-1, every_n_train_steps=every_n_train_steps,
                                 save_last=True)
    trainer = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=4, limit_val_batches=1,
                      callbacks=[Watch(), checkpoint], **QUIET)
    trainer.fit(Model())
    seen = {}
    for name in sorted(os.listdir(root / "ck")):
        held = torch.load(root / "ck" / name, weights_only=False)
        seen[name] = (held["epoch"], held["global_step"], held["module_saw"], held["callback_saw"])
    return seen, trainer.current_epoch
'''

SPEC = Spec(SOURCE, "spec_save_hooks")


@pytest.mark.parametrize("every_n_train_steps", [None, 2], ids=["epoch-saves", "step-saves"])
def test_on_save_checkpoint_sees_the_files_epoch(every_n_train_steps: int | None, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("saves", tmp_path, every_n_train_steps=every_n_train_steps)
    assert ours == theirs
    assert all(held[0] == held[2][0] == held[3][0] for held in ours[0].values())
