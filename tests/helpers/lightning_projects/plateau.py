"""A classifier with two optimizers' worth of schedule in one: Adam with `ReduceLROnPlateau`
on `val_loss` (the lr_scheduler dict with `monitor`, `interval="epoch"`), validated every
epoch on `limit_val_batches=3`, `on_validation_epoch_end` gathering `validation_step`
outputs kept in a list (Lightning 2's replacement for `validation_epoch_end`), and
`LearningRateMonitor`. Optionally a second, per-step StepLR with `frequency`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import LearningRateMonitor
from trainer.loggers import CSVLogger


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 0.05, patience: int = 0, step_frequency: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        self.outputs: list[dict[str, torch.Tensor]] = []
        self.lr_history: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = self(x)
        out = {"loss": F.cross_entropy(logits, y, reduction="sum"), "correct": (logits.argmax(-1) == y).sum(), "n": torch.tensor(len(y))}
        self.outputs.append(out)
        return out

    def on_validation_epoch_end(self) -> None:
        n = torch.stack([o["n"] for o in self.outputs]).sum()
        self.log("val_loss", torch.stack([o["loss"] for o in self.outputs]).sum() / n, prog_bar=True)
        self.log("val_acc", torch.stack([o["correct"] for o in self.outputs]).sum().float() / n)
        self.outputs.clear()

    def on_train_epoch_end(self) -> None:
        self.lr_history.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=self.hparams.patience)
        schedulers = [{"scheduler": plateau, "monitor": "val_loss", "interval": "epoch", "frequency": 1, "name": "plateau"}]
        if self.hparams.step_frequency:
            step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
            schedulers.append({"scheduler": step, "interval": "step", "frequency": self.hparams.step_frequency, "name": "decay"})
        return [optimizer], schedulers


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 6, step_frequency: int = 0) -> dict[str, Any]:
    L.seed_everything(11)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(160, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    train, val = TensorDataset(x[:96], y[:96]), TensorDataset(x[96:], y[96:])
    model = Classifier(step_frequency=step_frequency)
    lr_monitor = LearningRateMonitor(logging_interval="epoch")
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir,
                        logger=CSVLogger(root_dir, name="csv"), callbacks=[lr_monitor], limit_val_batches=3,
                        log_every_n_steps=4, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(train, batch_size=12, shuffle=True), DataLoader(val, batch_size=16))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "lr_history": model.lr_history,
            "lr": trainer.optimizers[0].param_groups[0]["lr"]}
