"""`max_epochs=0` / `max_steps=0` as Lightning runs them: the sanity check only (no training
hook, no checkpoint written, the weights untouched); and a fit resumed from a run that already
reached its limits, which trains nothing in both packages. Under both packages in one process."""

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


class Calls(Callback):
    def __init__(self):
        self.calls = []

    def on_fit_start(self, trainer, module):
        self.calls.append("on_fit_start")

    def on_sanity_check_start(self, trainer, module):
        self.calls.append("on_sanity_check_start")

    def on_train_start(self, trainer, module):
        self.calls.append("on_train_start")

    def on_train_epoch_start(self, trainer, module):
        self.calls.append("on_train_epoch_start")

    def on_validation_end(self, trainer, module):
        self.calls.append("on_validation_end")

    def on_train_end(self, trainer, module):
        self.calls.append("on_train_end")

    def on_fit_end(self, trainer, module):
        self.calls.append("on_fit_end")


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names
                  if f.endswith(".ckpt"))


def zero(root, limit):
    torch.manual_seed(0)
    model = BoringModel()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calls = Calls()
    trainer = Trainer(default_root_dir=root, limit_val_batches=2, callbacks=[calls, ModelCheckpoint(dirpath=root / "ck")],
                      **{limit: 0}, **QUIET)
    trainer.fit(model)
    unchanged = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    return calls.calls, unchanged, trainer.global_step, trainer.current_epoch, files(root)


def resumed_after_the_end(root):
    torch.manual_seed(0)
    first = Trainer(default_root_dir=root, max_epochs=1, limit_train_batches=2, limit_val_batches=1, **QUIET)
    first.fit(BoringModel())
    path = root / "done.ckpt"
    first.save_checkpoint(path)
    calls = Calls()
    second = Trainer(default_root_dir=root / "again", max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                     callbacks=[calls], **QUIET)
    second.fit(BoringModel(), ckpt_path=path)
    return calls.calls, second.global_step, second.current_epoch, files(root / "again")
'''

SPEC = Spec(SOURCE, "spec_zero_limits")


@pytest.mark.parametrize("limit", ["max_epochs", "max_steps"])
def test_a_zero_limit_runs_the_sanity_check_only(limit: str, tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("zero", tmp_path, limit=limit)
    assert ours == theirs
    assert ours[0] == ["on_fit_start", "on_sanity_check_start", "on_validation_end", "on_fit_end"]
    assert ours[1] and ours[4] == []


def test_a_resume_past_the_limits_trains_nothing_and_writes_nothing(tmp_path: Path) -> None:
    """A deliberate difference (docs/lightning.md): Lightning runs no training hook; here
    `on_train_start`/`on_train_end` run, so work a run stopped at its end left unfinished
    completes (SWA's final transfer), and the run's `last.ckpt` is written. Nothing trains in
    either."""
    ours, theirs = SPEC.compare("resumed_after_the_end", tmp_path)
    assert ours[1:3] == theirs[1:3] and ours[1] == 2
    assert [c for c in ours[0] if c not in ("on_train_start", "on_train_end")] == theirs[0]
    assert "on_train_start" in ours[0] and "on_train_start" not in theirs[0]
