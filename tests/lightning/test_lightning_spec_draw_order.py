"""Where fit's hooks and the module's loader methods draw from the random streams, compared
with Lightning in one process: `on_fit_start` runs before `train_dataloader()` builds its
data (a hook that draws first gets the same numbers, and the data and weights are
Lightning's); the first epoch's iterator is opened before `val_dataloader()` (without a
sanity check) and before `on_train_start`, and `val_dataloader()` is asked first when a sanity
check runs, so a validation set drawn at random and what the start hooks draw are Lightning's;
the sanity check's hooks draw inside its isolated streams. (With a sanity check Lightning asks
for `train_dataloader()` after it, here before it; the check restores the streams, so both draw
the same numbers.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import Callback, Trainer
from trainer.demos.boring_classes import BoringModel

QUIET = dict(enable_progress_bar=False, enable_model_summary=False, logger=False)


class Model(BoringModel):
    def __init__(self, where):
        super().__init__()
        self.where, self.seen = where, []

    def draw(self, name):
        if name in self.where:
            self.seen.append((name, torch.rand(1).item()))

    def setup(self, stage):
        self.draw("setup")

    def on_fit_start(self):
        self.draw("on_fit_start")
        if "on_fit_start" in self.where:  # a buffer made at fit start that training uses
            self.register_buffer("noise", torch.randn(2))

    def train_dataloader(self):
        self.draw("train_dataloader")
        return DataLoader(TensorDataset(torch.randn(16, 32)), batch_size=4, shuffle=True)

    def val_dataloader(self):
        self.draw("val_dataloader")
        return DataLoader(TensorDataset(torch.randn(8, 32)), batch_size=4, shuffle=True)

    def on_train_start(self):
        self.draw("on_train_start")

    def on_train_epoch_start(self):
        self.draw("on_train_epoch_start")

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.step(batch[0]))

    def training_step(self, batch, batch_idx):
        loss = self.step(batch[0])
        return loss + (self.noise.sum() * 0.01 * self.layer.weight.sum() if hasattr(self, "noise") else 0)


class SanityDraws(Callback):
    def on_sanity_check_end(self, trainer, module):
        torch.rand(3)  # inside the sanity check's isolated streams: training never sees it


def run(root, where, sanity):
    torch.manual_seed(0)
    model = Model(where)
    trainer = Trainer(default_root_dir=root, max_epochs=2, num_sanity_val_steps=sanity, limit_val_batches=2,
                      callbacks=[SanityDraws()], **QUIET)
    trainer.fit(model)
    return model.seen, [p.detach().tolist() for p in model.parameters()], float(trainer.callback_metrics["val_loss"])
'''

SPEC = Spec(SOURCE, "spec_draw_order")


@pytest.mark.parametrize("sanity", [0, 2])
def test_draws_before_training_are_lightnings(sanity: int, tmp_path: Path) -> None:
    where = ("setup", "on_fit_start", "train_dataloader", "val_dataloader", "on_train_start", "on_train_epoch_start")
    ours, theirs = SPEC.compare("run", tmp_path, where=where, sanity=sanity)
    assert ours == theirs
    assert {name for name, _ in ours[0]} == set(where)
