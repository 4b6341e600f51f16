"""The overridable optimization hooks of Lightning's docs in one module: `optimizer_step`
with the docs' learning-rate warm-up (`optimizer.step(closure=optimizer_closure)`),
`configure_gradient_clipping` clipping only after a warm-up with `self.clip_gradients`,
`optimizer_zero_grad` with `set_to_none=False`, `on_before_zero_grad`, `on_before_backward`,
`lr_scheduler_step` with a custom cadence, and two parameter groups with different learning
rates and weight decay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class Tuned(L.LightningModule):
    def __init__(self, lr: float = 0.01, warmup: int = 6, clip_after: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.LayerNorm(32), torch.nn.GELU())
        self.head = torch.nn.Linear(32, 1)
        self.calls = {"zero_grad": 0, "before_backward": 0, "scheduler": 0, "clip": 0}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.huber_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.huber_loss(self(x), y))

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        optimizer.step(closure=optimizer_closure)
        if self.trainer.global_step < self.hparams.warmup:  # the docs' manual warm-up
            scale = min(1.0, float(self.trainer.global_step + 1) / self.hparams.warmup)
            for pg, base in zip(optimizer.param_groups, (self.hparams.lr, self.hparams.lr * 0.1)):
                pg["lr"] = scale * base

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None, gradient_clip_algorithm: Any = None) -> None:
        if self.global_step >= self.hparams.clip_after:
            self.calls["clip"] += 1
            self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)

    def on_before_zero_grad(self, optimizer: Any) -> None:
        self.calls["zero_grad"] += 1

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.calls["before_backward"] += 1

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.calls["scheduler"] += 1
        if self.current_epoch >= 1:  # hold the schedule for the first epoch
            scheduler.step()

    def configure_optimizers(self) -> Any:
        groups = [{"params": self.encoder.parameters(), "lr": self.hparams.lr, "weight_decay": 0.05},
                  {"params": self.head.parameters(), "lr": self.hparams.lr * 0.1, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups)
        scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    L.seed_everything(8)
    g = torch.Generator().manual_seed(30)
    x = torch.randn(120, 8, generator=g)
    y = (x[:, :3] ** 2).sum(-1) - x[:, 5] + 0.1 * torch.randn(120, generator=g)
    model = Tuned()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        gradient_clip_val=0.5, gradient_clip_algorithm="norm", enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:96], y[:96]), batch_size=12, shuffle=True),
                DataLoader(TensorDataset(x[96:], y[96:]), batch_size=12))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "calls": dict(model.calls),
            "lrs": [pg["lr"] for pg in trainer.optimizers[0].param_groups]}
