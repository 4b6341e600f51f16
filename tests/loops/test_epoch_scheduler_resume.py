"""An epoch-interval scheduler steps right after the epoch's last optimizer step (Lightning's
moment), so a checkpoint written after that point, in `on_train_batch_end` of the last batch,
in the epoch's validation or in `on_train_epoch_end`, holds the stepped scheduler. A run
stopped at any of those points resumes to the weights and scheduler of one that never
stopped: the scheduler is not stepped a second time for that epoch, and a validation that
reached `on_validation_end` is not run again (its loader's iterator would draw a seed again)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, assert_same_weights, make_data
from trainer import Callback, Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


class StopAt(Callback):
    """Ctrl-C at one point of epoch 0's end phase."""

    def __init__(self, where: str) -> None:
        self.where = where

    def _maybe(self, trainer: Any, where: str) -> None:
        if where == self.where and trainer.current_epoch == 0 and not trainer.sanity_checking:
            raise KeyboardInterrupt

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 4:  # the epoch's last batch
            self._maybe(trainer, "last_batch")

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        self._maybe(trainer, "validation")

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self._maybe(trainer, "train_epoch_end")


def loaders() -> tuple[DataLoader, DataLoader]:
    return DataLoader(make_data(20), batch_size=4, shuffle=True), DataLoader(make_data(8, seed=3), batch_size=4)


def scheduler_state(trainer: Trainer) -> dict[str, Any]:
    return trainer.lr_scheduler_configs[0].scheduler.state_dict()


@pytest.mark.parametrize("where", ["last_batch", "validation", "train_epoch_end"])
def test_a_stop_after_the_epochs_scheduler_step_resumes_exactly(where: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = TinyNet(scheduler="epoch")
    full = Trainer(max_epochs=3, **QUIET)
    full.fit(reference, *loaders())

    torch.manual_seed(0)
    model = TinyNet(scheduler="epoch")
    first = Trainer(max_epochs=3, callbacks=[StopAt(where)], root_dir=tmp_path, logger=False, enable_progress_bar=False)
    with pytest.raises(KeyboardInterrupt):
        first.fit(model, *loaders())
    held = torch.load(first.log_dir / "last.ckpt", weights_only=True)
    assert held["schedulers"][0]["state"]["last_epoch"] == 1  # saved with epoch 0's step taken
    resumed = TinyNet(scheduler="epoch")
    second = Trainer(max_epochs=3, **QUIET)
    second.fit(resumed, *loaders(), ckpt_path=first.log_dir / "last.ckpt")
    assert_same_weights(reference, resumed)
    assert scheduler_state(second) == scheduler_state(full)
    assert scheduler_state(full)["last_epoch"] == 3
