"""The `self.log` options real code mixes: `sync_dist=True`, `reduce_fx="max"` / `"sum"`,
explicit `batch_size=`, Python floats, `log_dict(..., prog_bar=True, on_step=True,
on_epoch=True)` in training, `on_step=True` in validation, `logger=False` metrics, and a
callback that reads `trainer.callback_metrics`, `trainer.progress_bar_metrics` and
`trainer.logged_metrics` at the end of every validation (and the progress bar's metrics after
every batch). Batches are of unequal sizes (the last
one short) so the weighting of epoch means matters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import Callback
from trainer.loggers import CSVLogger


class MetricsSpy(Callback):
    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.snapshots: list[dict[str, Any]] = []
        self.bar_per_step: list[float | None] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        value = trainer.progress_bar_metrics.get("mse_step")  # what a custom progress bar shows
        self.bar_per_step.append(None if value is None else float(value))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        snap = {}
        for source in ("callback_metrics", "progress_bar_metrics", "logged_metrics"):
            metrics = getattr(trainer, source)
            snap[source] = {k: float(metrics[k]) for k in self.keys if k in metrics}
        self.snapshots.append(snap)


class Scorer(L.LightningModule):
    def __init__(self, lr: float = 0.05, activation: str = "tanh") -> None:
        super().__init__()
        self.save_hyperparameters()
        act = {"tanh": torch.nn.Tanh, "silu": torch.nn.SiLU}[activation]
        self.net = torch.nn.Sequential(torch.nn.Linear(7, 20), act(), torch.nn.Linear(20, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        err = (self.net(x).squeeze(-1) - y).abs()
        loss = err.pow(2).mean()
        self.log_dict({"mse": loss, "mae": err.mean()}, prog_bar=True, on_step=True, on_epoch=True, sync_dist=True)
        self.log("max_err", err.max(), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("n_seen", float(len(y)), on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("hidden", loss * 2, logger=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        err = (self.net(x).squeeze(-1) - y).abs()
        self.log("val_mse", err.pow(2).mean(), on_step=True, on_epoch=True, prog_bar=True, sync_dist=True)
        self.log("val_mae_w", err.mean(), batch_size=len(y), sync_dist=True)
        self.log("val_worst", err.max(), reduce_fx="max", prog_bar=True)
        self.log("val_count", float(len(y)), reduce_fx="sum")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_mse", (self.net(x).squeeze(-1) - y).pow(2).mean(), batch_size=len(y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


KEYS = ("mse", "mse_step", "mse_epoch", "mae", "mae_epoch", "max_err", "n_seen", "hidden", "val_mse", "val_mse_epoch",
        "val_mae_w", "val_worst", "val_count")


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3, activation: str = "tanh") -> dict[str, Any]:
    L.seed_everything(31)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(100, 7, generator=g)
    y = x[:, 0] - 2 * x[:, 3] + 0.1 * torch.randn(100, generator=g)
    spy = MetricsSpy(KEYS)
    model = Scorer(activation=activation)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=CSVLogger(root_dir, name="csv"),
                        callbacks=[spy], log_every_n_steps=3, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:70], y[:70]), batch_size=16, shuffle=True),  # 16,16,16,16,6
                DataLoader(TensorDataset(x[70:], y[70:]), batch_size=12))  # 12,12,6
    fitted = {k: v for k, v in trainer.callback_metrics.items() if k in KEYS}
    progress_bar = {k: float(v) for k, v in trainer.progress_bar_metrics.items() if k in KEYS}
    logged = {k: float(v) for k, v in trainer.logged_metrics.items() if k in KEYS}
    tested = trainer.test(model, DataLoader(TensorDataset(x[70:], y[70:]), batch_size=7), verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": fitted, "snapshots": spy.snapshots, "test": dict(tested),
            "progress_bar": progress_bar, "logged": logged, "bar_per_step": spy.bar_per_step,
            "after_test": sorted(k for k in trainer.callback_metrics if not k.startswith("train/"))}
