"""No host synchronisation per optimizer step with a fused optimizer, checked by CUDA itself:
`torch.cuda.set_sync_debug_mode("error")` makes any synchronising call raise. fp32/bf16 (the
device-side non-finite guard) and amp (the GradScaler's skip kept on the device), with
clipping; the window excludes logging steps (they read to the host by design). The watcher
uses the batch hooks only: a callback overriding `on_train_step_end` asks for amp's verdict at
once (one read per step, by design), so it would measure itself. The usual callbacks
(ModelCheckpoint, LearningRateMonitor) must not bring that read back."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.gpu._references import GPU, QUIET
from tests.helpers.reference import TinyNet, make_data
from trainer import Callback, Trainer

pytestmark = GPU


class Fused(TinyNet):
    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01, fused=True)


class SyncsAreErrors(Callback):
    """From optimizer step `start` to `stop` every synchronising CUDA call raises."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop, self.checked = start, stop, 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.start:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.start < trainer.global_step <= self.stop:  # one batch per step: no accumulation here
            self.checked += 1
        if trainer.global_step == self.stop:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("clip", [None, 1.0])
@pytest.mark.parametrize("usual_callbacks", [False, True], ids=["alone", "with_checkpoint_and_lr_monitor"])
def test_no_host_sync_per_step_with_a_fused_optimizer(precision, clip, usual_callbacks, tmp_path):
    from callbacks import LearningRateMonitor, ModelCheckpoint

    watch = SyncsAreErrors(start=3, stop=20)
    more = [ModelCheckpoint(dirpath=tmp_path), LearningRateMonitor()] if usual_callbacks else []
    data = DataLoader(make_data(200), batch_size=8, shuffle=True, pin_memory=True)  # 25 steps: one epoch
    trainer = Trainer(precision=precision, max_epochs=1, log_every_n_steps=1000, gradient_clip_val=clip, device="cuda",
                      num_sanity_val_steps=0, callbacks=[watch, *more], **QUIET)
    try:
        trainer.fit(Fused(dropout=0.0), data)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert watch.checked == 17 and trainer.global_step == 25
