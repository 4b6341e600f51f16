"""A custom stop condition: a callback sets `trainer.should_stop = True` in
`on_train_batch_end` once the training loss falls below a target (mid-epoch), with a
`ModelCheckpoint(monitor="val_loss")` and a CSVLogger; the final validation metrics, the
saved files and the validation steps are compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import Callback, ModelCheckpoint


class StopAtLoss(Callback):
    def __init__(self, target: float) -> None:
        self.target = target
        self.stopped_at: int | None = None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.stopped_at is None and float(outputs["loss"]) < self.target:
            self.stopped_at = trainer.global_step
            trainer.should_stop = True


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.validated_at: list[int] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x).squeeze(-1), y))

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validated_at.append(self.global_step)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.02)


def main(root_dir: str | Path, precision: str = "32-true", target: float = 0.05, max_epochs: int = 10) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(12)
    g = torch.Generator().manual_seed(12)
    x = torch.randn(80, 4, generator=g)
    y = 0.5 * x[:, 0] - x[:, 2]
    stopper = StopAtLoss(target)
    checkpoint = ModelCheckpoint(dirpath=root_dir / "ckpts", monitor="val_loss", filename="{epoch}-{step}-{val_loss:.4f}")
    model = Model()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[stopper, checkpoint], enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:64], y[:64]), batch_size=8, shuffle=True),
                DataLoader(TensorDataset(x[64:], y[64:]), batch_size=8))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "stopped_at": stopper.stopped_at,
            "validated_at": model.validated_at, "files": sorted(p.name for p in (root_dir / "ckpts").iterdir())}
