"""When fit validates, as Lightning's own tests specify it (tests_pytorch/trainer/flags/
test_check_val_every_n_epoch.py and the int-interval cases of test_val_check_interval.py), each
scenario run under Lightning and here, with only the imports changed, and compared:
`check_val_every_n_epoch` with `max_epochs` or `max_steps`, an int `val_check_interval` counted
over the run (`check_val_every_n_epoch=None`) on a sized and on an endless dataset, and the
combinations refused.
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
from trainer.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False)


from tests.helpers.lightning_spec import weights


class Recording(BoringModel):
    def __init__(self, train_samples=None, endless=False):
        super().__init__()
        self.train_samples, self.endless = train_samples, endless
        self.validated, self.epoch_ends, self.batches = [], [], 0

    def training_step(self, batch, batch_idx):
        self.batches += 1
        return super().training_step(batch, batch_idx)

    def on_validation_epoch_start(self):
        self.validated.append((self.current_epoch, self.global_step, self.batches))

    def on_train_epoch_end(self):
        self.epoch_ends.append(self.current_epoch)

    def train_dataloader(self):
        if self.train_samples is None:
            return super().train_dataloader()
        if self.endless:
            return DataLoader(RandomIterableDataset(32, count=self.train_samples))
        return DataLoader(RandomDataset(32, self.train_samples))


def every_n_epochs(root, max_epochs):
    """Lightning: test_check_val_every_n_epoch."""
    torch.manual_seed(0)
    model = Recording(train_samples=3)
    trainer = Trainer(default_root_dir=root, max_epochs=max_epochs, num_sanity_val_steps=0, limit_val_batches=2,
                      check_val_every_n_epoch=2, **QUIET)
    trainer.fit(model)
    return {"validated": model.validated, "epoch_ends": model.epoch_ends, "weights": weights(model)}


def every_n_epochs_max_steps(root):
    """Lightning: test_check_val_every_n_epoch_with_max_steps."""
    torch.manual_seed(0)
    model = Recording(train_samples=2)
    trainer = Trainer(default_root_dir=root, max_steps=8, check_val_every_n_epoch=3, num_sanity_val_steps=0,
                      limit_val_batches=1, **QUIET)
    trainer.fit(model)
    return {"validated": model.validated, "current_epoch": trainer.current_epoch, "global_step": trainer.global_step,
            "weights": weights(model)}


def interval_over_the_run(root, endless):
    """Lightning: test_validation_check_interval_exceed_data_length_correct (accumulate_grad_batches=1)."""
    torch.manual_seed(0)
    model = Recording(train_samples=4 if not endless else 112, endless=endless)
    trainer = Trainer(default_root_dir=root, limit_val_batches=1, max_steps=12, val_check_interval=3,
                      check_val_every_n_epoch=None, num_sanity_val_steps=0, **QUIET)
    trainer.fit(model)
    # An endless loader's weights differ by a documented difference: Lightning reads one batch
    # ahead (its samples drawn before the validation's draws), this package does not.
    return {"validated": model.validated, "global_step": trainer.global_step,
            "weights": None if endless else weights(model)}


def refused(root):
    """Lightning: test_validation_check_interval_exceed_data_length_wrong,
    test_val_check_interval_float_with_none_check_val_every_n_epoch, test_check_val_every_n_epoch_exception."""
    out = {}
    for name, kwargs in (("interval beyond the epoch", dict(limit_train_batches=10, val_check_interval=100)),
                         ("fraction over the run", dict(val_check_interval=0.5, check_val_every_n_epoch=None)),
                         ("every 0 epochs", dict(check_val_every_n_epoch=0))):
        try:
            trainer = Trainer(default_root_dir=root, max_epochs=1, **kwargs, **QUIET)
            trainer.fit(BoringModel())
            out[name] = None
        except Exception:
            out[name] = "error"
    return out
'''

SPEC = Spec(SOURCE, "spec_val_schedule")


@pytest.mark.parametrize("max_epochs", [1, 5])
def test_check_val_every_n_epoch(max_epochs: int, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("every_n_epochs", tmp_path, max_epochs=max_epochs)
    assert ours == theirs


def test_check_val_every_n_epoch_with_max_steps(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("every_n_epochs_max_steps", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("endless", [False, True])
def test_int_interval_counted_over_the_run(endless: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("interval_over_the_run", tmp_path, endless=endless)
    assert ours == theirs


def test_refused_combinations(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("refused", tmp_path)
    assert ours == theirs == {"interval beyond the epoch": "error", "fraction over the run": "error",
                              "every 0 epochs": "error"}
