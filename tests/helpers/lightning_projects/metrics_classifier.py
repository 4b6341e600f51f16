"""A classifier with torchmetrics (Accuracy and F1 in a MetricCollection, `self.log_dict`),
OneCycleLR stepped every step over `self.trainer.estimated_stepping_batches`, EarlyStopping,
ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=2), LearningRateMonitor and a test
of the best checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from trainer.loggers import CSVLogger


class MetricsClassifier(L.LightningModule):
    def __init__(self, num_classes: int = 3, hidden: int = 16, max_lr: float = 0.05, total_steps: int | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, num_classes))
        metrics = torchmetrics.MetricCollection({
            "acc": torchmetrics.Accuracy(task="multiclass", num_classes=num_classes),
            "f1": torchmetrics.F1Score(task="multiclass", num_classes=num_classes, average="macro"),
        })
        self.train_metrics = metrics.clone(prefix="train_")
        self.val_metrics = metrics.clone(prefix="val_")
        self.test_metrics = metrics.clone(prefix="test_")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_metrics(logits, y)
        self.log_dict(self.train_metrics, on_step=False, on_epoch=True)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.val_metrics.update(logits, y)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        self.log_dict(self.val_metrics.compute())
        self.val_metrics.reset()

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.test_metrics(logits, y)
        self.log_dict(self.test_metrics)
        self.log("test_loss", F.cross_entropy(logits, y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.max_lr, momentum=0.9)
        total_steps = self.hparams.total_steps or self.trainer.estimated_stepping_batches
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.max_lr, total_steps=total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def make_data() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(200, 6, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    return TensorDataset(x[:120], y[:120]), TensorDataset(x[120:160], y[120:160]), TensorDataset(x[160:], y[160:])


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 6, total_steps: int | None = None) -> dict[str, Any]:
    """`total_steps=None`: OneCycleLR's length is `self.trainer.estimated_stepping_batches`."""
    L.seed_everything(17)
    train, val, test = make_data()
    model = MetricsClassifier(total_steps=total_steps)
    checkpoint = ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=2, filename="{epoch}-{val_acc:.4f}")
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=CSVLogger(root_dir, name="csv"),
        callbacks=[checkpoint, EarlyStopping(monitor="val_acc", mode="max", patience=2), LearningRateMonitor("step")],
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True), DataLoader(val, batch_size=16))
    validated = dict(trainer.callback_metrics)
    tested = trainer.test(dataloaders=DataLoader(test, batch_size=16), ckpt_path="best", verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "test": tested, "checkpoint": checkpoint}
