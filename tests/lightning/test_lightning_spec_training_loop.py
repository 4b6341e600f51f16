"""The training loop as Lightning's own tests specify it (tests_pytorch/loops/test_training_loop.py),
each scenario run under Lightning and here, with only the imports changed, and compared: what
`on_train_batch_end` receives, the data order after `seed_everything` with and without a
sanity check, `on_train_batch_start` returning -1 (the rest of the epoch skipped, schedulers
still stepped), `should_stop` set mid-epoch, and `val_check_interval` beyond the epoch with
validation off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from trainer import Trainer, seed_everything
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False, enable_checkpointing=False)


def outputs(root):
    """Lightning: test_outputs_format (the training_step's dict reaches on_train_batch_end)."""
    seen = []

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            output = super().training_step(batch, batch_idx)
            self.log("foo", 123)
            output["foo"] = 123
            return output

        def on_train_batch_end(self, outputs, *_):
            seen.append((sorted(outputs), outputs["foo"], float(outputs["loss"])))

    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_val_batches=1, limit_train_batches=2, **QUIET)
    trainer.fit(Model())
    return seen, float(trainer.callback_metrics["foo"])


def seeded(root, seed_once):
    """Lightning: test_training_starts_with_seed (the sanity check leaves the random streams alone)."""
    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.seen = []

        def training_step(self, batch, batch_idx):
            self.seen.append(batch.view(-1))
            return super().training_step(batch, batch_idx)

    def run(**flags):
        model = Model()
        Trainer(default_root_dir=root, max_steps=2, **QUIET, **flags).fit(model)
        return torch.cat(model.seen)

    seed_everything(123)
    first = run(num_sanity_val_steps=0)
    if not seed_once:
        seed_everything(123)
    second = run(num_sanity_val_steps=2)
    return first.tolist(), second.tolist()


def skip_rest(root, max_epochs, batch_idx_):
    """Lightning: test_on_train_batch_start_return_minus_one, test_lr_updated_on_train_batch_start_returns_minus_one."""
    class Model(BoringModel):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == batch_idx_ else None

    torch.manual_seed(0)
    model = Model()
    trainer = Trainer(default_root_dir=root, max_epochs=max_epochs, limit_train_batches=10, limit_val_batches=1, **QUIET)
    trainer.fit(model)
    return {"global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
            "lr": [g["lr"] for g in trainer.optimizers[0].param_groups],
            "weights": {k: v.tolist() for k, v in model.state_dict().items()}}


def stop_mid_epoch(root):
    """Lightning: test_should_stop_mid_epoch (validation still runs, at the step the stop came)."""
    class Model(BoringModel):
        def __init__(self):
            super().__init__()
            self.validation_called_at = None

        def training_step(self, batch, batch_idx):
            if batch_idx == 4:
                self.trainer.should_stop = True
            return super().training_step(batch, batch_idx)

        def validation_step(self, *args):
            self.validation_called_at = (self.trainer.current_epoch, self.trainer.global_step)
            return super().validation_step(*args)

    model = Model()
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=10, limit_val_batches=1, **QUIET)
    trainer.fit(model)
    return {"current_epoch": trainer.current_epoch, "global_step": trainer.global_step,
            "validation_called_at": model.validation_called_at}


def interval_beyond_epoch(root, limit_val_batches):
    """Lightning: test_val_check_interval_with_limit_val_batches_zero (no error when validation is off)."""
    trainer = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=5, val_check_interval=10,
                      limit_val_batches=limit_val_batches, **QUIET)
    trainer.fit(BoringModel())
    return trainer.global_step
'''

SPEC = Spec(SOURCE, "spec_training_loop")


def test_outputs_reach_on_train_batch_end(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("outputs", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("seed_once", [True, False])
def test_sanity_check_leaves_the_seeded_order(seed_once: bool, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("seeded", tmp_path, seed_once=seed_once)
    assert ours == theirs
    assert (ours[0] == ours[1]) is (not seed_once)


@pytest.mark.parametrize(("max_epochs", "batch_idx_"), [(2, 5), (3, 8), (4, 12)])
def test_on_train_batch_start_minus_one(max_epochs: int, batch_idx_: int, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("skip_rest", tmp_path, max_epochs=max_epochs, batch_idx_=batch_idx_)
    assert ours == theirs


def test_should_stop_mid_epoch(tmp_path: Path) -> None:
    """current_epoch after a stop inside an epoch is one lower here (docs/lightning.md); the step
    and the validation it triggers are Lightning's."""
    ours, theirs = SPEC.compare("stop_mid_epoch", tmp_path)
    assert theirs["current_epoch"] == 1 and ours["current_epoch"] == 0
    ours.pop("current_epoch"), theirs.pop("current_epoch")
    assert ours == theirs


@pytest.mark.parametrize("limit_val_batches", [0, 0.0])
def test_val_check_interval_beyond_the_epoch_without_validation(limit_val_batches: Any, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("interval_beyond_epoch", tmp_path, limit_val_batches=limit_val_batches)
    assert ours == theirs
