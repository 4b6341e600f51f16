"""Validation four times an epoch (`val_check_interval=0.25`) on a capped validation set
(`limit_val_batches=2`), a top-2 `ModelCheckpoint(monitor="val_loss",
filename="{epoch}-{step}-{val_loss:.4f}")` saving at those mid-epoch validations, a callback
collecting `validation_step` outputs in `on_validation_batch_end`, `configure_callbacks`
adding an `EarlyStopping` from the module, `self.trainer.datamodule` read in the module, and
`trainer.validate(ckpt_path="best")` at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import Callback, EarlyStopping, ModelCheckpoint


class Data(L.LightningDataModule):
    def __init__(self, batch_size: int = 6) -> None:
        super().__init__()
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(21)
        x = torch.randn(132, 5, generator=g)
        self.sets = {"train": TensorDataset(x[:96], x[:96].pow(2).sum(-1)), "val": TensorDataset(x[96:], x[96:].pow(2).sum(-1))}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["train"], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.sets["val"], batch_size=12)


class OutputsCollector(Callback):
    def __init__(self) -> None:
        self.outputs: list[tuple[int, float]] = []

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if not trainer.sanity_checking:
            self.outputs.append((trainer.global_step, float(outputs["mse"])))


class Quadratic(L.LightningModule):
    def __init__(self, lr: float = 0.02) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 32), torch.nn.Softplus(), torch.nn.Linear(32, 1))
        self.batch_sizes: list[int] = []

    def on_train_start(self) -> None:
        self.batch_sizes.append(self.trainer.datamodule.batch_size)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        mse = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("val_loss", mse, prog_bar=True)
        return {"mse": mse}

    def configure_callbacks(self) -> list[Any]:
        return [EarlyStopping(monitor="val_loss", patience=3, min_delta=0.01)]

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(4)
    data = Data()
    model = Quadratic()
    checkpoint = ModelCheckpoint(dirpath=root_dir / "ckpts", filename="{epoch}-{step}-{val_loss:.4f}", monitor="val_loss", save_top_k=2)
    collector = OutputsCollector()
    trainer = L.Trainer(max_epochs=max_epochs, val_check_interval=0.25, limit_val_batches=2, precision=precision,
                        default_root_dir=root_dir, logger=False, callbacks=[checkpoint, collector],
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=data)  # 16 batches an epoch: validation after 4, 8, 12, 16
    fitted = dict(trainer.callback_metrics)
    stopper = trainer.early_stopping_callback
    stopped = {"stopped_epoch": stopper.stopped_epoch, "wait": stopper.wait_count, "best_score": float(stopper.best_score),
               "should_stop": trainer.should_stop, "current_epoch": trainer.current_epoch}
    validated = trainer.validate(datamodule=data, ckpt_path="best", verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": fitted, "validate": dict(validated), "outputs": collector.outputs,
            "files": sorted(p.name for p in (root_dir / "ckpts").iterdir()), "best": Path(checkpoint.best_model_path).name,
            "batch_sizes": model.batch_sizes, "stopped": stopped}
