"""Tensors the Trainer keeps past a step are its own copies: a compiled graph's outputs (CUDA
graphs reuse their memory on the next replay) or tensors the module changes in place must not
change what was logged or predicted. And what `compile` can't do right is refused or said."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.reference import TinyNet, loader, make_data
from trainer import Trainer

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, device="cpu")


class ReusedOutput(TinyNet):
    """Logs a tensor, then overwrites it in place, as a CUDA-graph replay overwrites its outputs."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.register_buffer("scratch", torch.zeros(()))
        self.logged: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.scratch.fill_(float(batch_idx))
        self.log("scratch", self.scratch)
        self.logged.append(float(batch_idx))
        self.scratch.fill_(-1000.0)  # the "next replay"
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.scratch.fill_(7.0)
        self.log("val/scratch", self.scratch, on_step=True, on_epoch=False)
        self.scratch.fill_(-1000.0)


def test_a_logged_tensor_is_copied_not_kept_by_reference():
    model = ReusedOutput()
    trainer = Trainer(max_steps=3, log_every_n_steps=100, **QUIET)
    trainer.fit(model, loader(make_data(40), shuffle=False))
    assert trainer.callback_metrics["scratch"] == model.logged[-1] == 2.0
    trainer.validate(model, loader(make_data(8), shuffle=False))
    assert trainer.callback_metrics["val/scratch"] == 7.0
