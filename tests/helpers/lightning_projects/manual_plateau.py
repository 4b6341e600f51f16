"""Manual optimization whose `ReduceLROnPlateau` is stepped by the module itself with the
validation loss from `self.trainer.callback_metrics` (Lightning's manual-optimization docs),
returned from `configure_optimizers` as `[optimizer], [scheduler]` without a `monitor`
(Lightning schedules nothing in manual mode, so it needs none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class ManualPlateau(L.LightningModule):
    def __init__(self, lr: float = 0.3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1))
        self.lrs: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.log("train_loss", loss)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x).squeeze(-1), y))

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self.lr_schedulers().step(self.trainer.callback_metrics["val_loss"])
        self.lrs.append(self.optimizers().param_groups[0]["lr"])

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return [opt], [torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)]


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 5) -> dict[str, Any]:
    L.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, generator=g)
    y = torch.sin(x[:, 0]) + 0.3 * torch.randn(60, generator=g)
    model = ManualPlateau()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:40], y[:40]), batch_size=8, shuffle=True),
                DataLoader(TensorDataset(x[40:], y[40:]), batch_size=10))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "lrs": model.lrs}
