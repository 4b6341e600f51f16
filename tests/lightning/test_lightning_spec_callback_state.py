"""Callback states in a checkpoint, as Lightning's callback tests rely on them (the finetuning,
SWA and weight-averaging resumes): a callback whose `state_dict()` is empty has no entry in
`checkpoint["callbacks"]`, and its `load_state_dict` is not called on resume, so one that
writes its state only once it has some resumes from an early checkpoint. Run under Lightning
and here, with only the imports changed, and compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from trainer import Callback, Trainer
from trainer.demos.boring_classes import BoringModel


class Best(Callback):
    """Writes its state only once it has a value (from the second epoch on)."""

    def __init__(self):
        self.best = None
        self.loaded = []

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch >= 1:
            self.best = float(trainer.current_epoch)

    def state_dict(self):
        return {"best": self.best} if self.best is not None else {}

    def load_state_dict(self, state):
        self.loaded.append(dict(state))
        self.best = state["best"]


class Plain(Callback):
    pass


def resume(root):
    torch.manual_seed(0)
    kwargs = dict(default_root_dir=root, limit_train_batches=2, limit_val_batches=0, logger=False,
                  enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer = Trainer(max_epochs=1, callbacks=[Best(), Plain()], **kwargs)
    model = BoringModel()
    trainer.fit(model)
    trainer.save_checkpoint(root / "first.ckpt")
    keys = sorted(torch.load(root / "first.ckpt", weights_only=False)["callbacks"])
    best = Best()
    trainer = Trainer(max_epochs=3, callbacks=[best, Plain()], **kwargs)
    trainer.fit(model, ckpt_path=root / "first.ckpt")
    trainer.save_checkpoint(root / "second.ckpt")
    later = sorted(torch.load(root / "second.ckpt", weights_only=False)["callbacks"])
    return keys, best.loaded, best.best, later
'''

SPEC = Spec(SOURCE, "spec_callback_state")


def test_empty_callback_states(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("resume", tmp_path)
    assert ours == theirs
