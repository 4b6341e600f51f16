"""The first epoch's iterator is opened when fit sets up its data, before `on_train_start`
(Lightning's moment: a worker seed drawn there, what the start hooks draw after it). A run
stopped inside that epoch resumes to the weights of one that never stopped, although the
start hooks drew between `iter()` and the first batch: the replay takes the random state of
each moment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, assert_same_weights, make_data
from trainer import Callback, Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu")


class Drawing(TinyNet):
    """Start hooks that draw, and a buffer from those draws that training uses."""

    def on_train_start(self) -> None:
        self.register_buffer("shift", torch.rand(1), persistent=False)

    def on_train_epoch_start(self) -> None:
        torch.rand(3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return super().training_step(batch, batch_idx) + 0.0 * self.shift.sum()


class StopAt(Callback):
    def __init__(self, where: str) -> None:
        self.where = where

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.where == "mid_epoch" and trainer.global_step == 3:
            raise KeyboardInterrupt


def loader(workers: int = 0) -> DataLoader:
    return DataLoader(make_data(40), batch_size=4, shuffle=True, num_workers=workers)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_resume_in_the_first_epoch_is_exact(workers: int, tmp_path: Path) -> None:
    torch.manual_seed(0)
    reference = Drawing()
    Trainer(max_epochs=2, **QUIET).fit(reference, loader(workers))

    torch.manual_seed(0)
    first = Trainer(max_epochs=2, callbacks=[StopAt("mid_epoch")], root_dir=tmp_path, logger=False,
                    enable_progress_bar=False)
    with pytest.raises(KeyboardInterrupt):
        first.fit(Drawing(), loader(workers))
    path = first.log_dir / "last.ckpt"
    torch.manual_seed(42)  # the checkpoint's streams must win
    resumed = Drawing()
    Trainer(max_epochs=2, **QUIET).fit(resumed, loader(workers), ckpt_path=path)
    assert_same_weights(reference, resumed)


def test_the_first_iterator_is_opened_before_the_start_hooks() -> None:
    """What the start hooks draw comes after the loader's iter() (its worker seed draw)."""
    seen: list[str] = []

    class Watched(DataLoader):
        def __iter__(self) -> Any:
            seen.append("iter")
            return super().__iter__()

    class Hooks(TinyNet):
        def on_train_start(self) -> None:
            seen.append("on_train_start")

        def on_train_epoch_start(self) -> None:
            seen.append("on_train_epoch_start")

    Trainer(max_epochs=2, **QUIET).fit(Hooks(), Watched(make_data(8), batch_size=4, shuffle=True))
    assert seen == ["iter", "on_train_start", "on_train_epoch_start", "on_train_epoch_start", "iter"]
