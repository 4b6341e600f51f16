"""A denoising autoencoder in the shape of the Lightning-Hydra template: metrics named
`train/loss`, `val/loss` and `val/loss_best`, logged as epoch means (`on_step=False,
on_epoch=True`); `ModelCheckpoint` and `EarlyStopping` watch the training epoch mean
`train/loss`; a CSV logger; and the template's `metric_dict = trainer.callback_metrics` taken
after `fit`, before `test`, read afterwards for the search objective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from trainer.loggers import CSVLogger


class DenoisingAE(L.LightningModule):
    def __init__(self, width: int = 12, code: int = 4, noise: float = 0.3, lr: float = 0.02, on_step: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(width, 16), torch.nn.ReLU(), torch.nn.Linear(16, code))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(code, 16), torch.nn.ReLU(), torch.nn.Linear(16, width))
        self.best_val = float("inf")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        noisy = x + self.hparams.noise * torch.randn_like(x)  # draws from torch's generator every step
        loss = F.mse_loss(self(noisy), x)
        self.log("train/loss", loss, on_step=self.hparams.on_step, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("val/loss", F.mse_loss(self(x), x), on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        current = self.trainer.callback_metrics.get("val/loss")
        if current is not None and not self.trainer.sanity_checking:
            self.best_val = min(self.best_val, float(current))
            self.log("val/loss_best", self.best_val)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("test/loss", F.mse_loss(self(x), x))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)}


class EpochLosses(L.Callback):
    """Reads the monitored value at each training epoch's end, as a user's callback would."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.seen.append(float(trainer.callback_metrics["train/loss"]))


def main(root_dir: str | Path, precision: str = "32-true", on_step: bool = False, max_epochs: int = 8) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(11)
    g = torch.Generator().manual_seed(4)
    basis = torch.randn(4, 12, generator=g)
    x = torch.randn(200, 4, generator=g) @ basis
    model = DenoisingAE(on_step=on_step)
    checkpoint = ModelCheckpoint(dirpath=root_dir / "checkpoints", monitor="train/loss", mode="min", save_top_k=2,
                                 save_last=True, filename="epoch_{epoch:03d}", auto_insert_metric_name=False)
    stop = EarlyStopping(monitor="train/loss", patience=1, min_delta=0.2, mode="min")
    losses = EpochLosses()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir,
                        logger=CSVLogger(root_dir, name="csv", version=0), log_every_n_steps=3,
                        callbacks=[checkpoint, stop, LearningRateMonitor(logging_interval="epoch"), losses],
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:128]), batch_size=16, shuffle=True),
                DataLoader(TensorDataset(x[128:168]), batch_size=20))
    metric_dict = trainer.callback_metrics  # the template keeps this reference, then tests
    train_metrics = {k: float(v) for k, v in metric_dict.items()}
    tested = trainer.test(model, DataLoader(TensorDataset(x[168:]), batch_size=16), ckpt_path="best", verbose=False)
    return {"model": model, "trainer": trainer, "val": train_metrics,
            "objective": float(metric_dict["val/loss_best"]),
            "kept": {k: float(v) for k, v in metric_dict.items()}, "test": {k: float(v) for k, v in tested[0].items()},
            "seen": losses.seen, "stopped_epoch": stop.stopped_epoch, "best": Path(checkpoint.best_model_path).name,
            "best_score": float(checkpoint.best_model_score),
            "best_k": sorted((Path(k).name, float(v)) for k, v in checkpoint.best_k_models.items()),
            "files": sorted(p.name for p in (root_dir / "checkpoints").iterdir()),
            "csv": (root_dir / "csv" / "version_0" / "metrics.csv").read_text()}
