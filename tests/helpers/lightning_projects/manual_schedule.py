"""Manual optimization the way Lightning's docs write it: one optimizer, gradient accumulation
by hand (`(batch_idx + 1) % 2`), `self.clip_gradients(opt, gradient_clip_val=...,
gradient_clip_algorithm="value")`, a `OneCycleLR` from `self.lr_schedulers()` stepped after
each optimizer step and a second scheduler stepped in `on_train_epoch_end`,
`self.trainer.is_last_batch` read in `on_train_batch_end`,
`on_after_backward` counting calls, and `self.log` of the learning rate and the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class ManualNet(L.LightningModule):
    def __init__(self, lr: float = 0.02, accumulate: int = 2, clip: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 24), torch.nn.GELU(), torch.nn.Linear(24, 24), torch.nn.GELU(), torch.nn.Linear(24, 1))
        self.backward_calls = 0
        self.last_batch_steps: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        one_cycle, _ = self.lr_schedulers()
        x, y = batch
        loss = F.smooth_l1_loss(self.net(x).squeeze(-1), y)
        self.manual_backward(loss / self.hparams.accumulate)
        if (batch_idx + 1) % self.hparams.accumulate == 0:
            self.clip_gradients(opt, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="value")
            opt.step()
            opt.zero_grad()
            one_cycle.step()
        self.log("loss", loss, prog_bar=True)
        self.log("lr", opt.param_groups[0]["lr"])
        self.log("global_step_seen", float(self.global_step), on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def on_train_epoch_end(self) -> None:
        _, step_lr = self.lr_schedulers()
        step_lr.step()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.is_last_batch:  # (True here and in training_step, as in Lightning)
            self.last_batch_steps.append(self.global_step)

    def on_after_backward(self) -> None:
        self.backward_calls += 1

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, nesterov=True)
        one_cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=4 * 6)
        step_lr = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        return [opt], [one_cycle, step_lr]


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4) -> dict[str, Any]:
    L.seed_everything(21)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(96, 5, generator=g)
    y = torch.tanh(x @ torch.randn(5, generator=g)) + 0.05 * torch.randn(96, generator=g)
    model = ManualNet()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True))  # 12 batches, 6 steps an epoch
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "backward_calls": model.backward_calls,
            "last_batch_steps": model.last_batch_steps, "lr": trainer.optimizers[0].param_groups[0]["lr"]}
