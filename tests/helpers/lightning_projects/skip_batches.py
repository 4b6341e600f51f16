"""A robust-training pattern: `training_step` returns `None` for batches it rejects (here,
batches whose targets hold a sentinel value), which Lightning documents as "skip to the next
batch", together with a per-step `StepLR`, `ModelCheckpoint(every_n_train_steps=...)` and
`max_epochs`. Weights, `global_step`, the learning rate and the checkpoint files are compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import ModelCheckpoint


class Robust(L.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.skipped = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        x, y = batch
        if (y == -100).any():  # a corrupt batch: skip it
            self.skipped += 1
            return None
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(2)
    g = torch.Generator().manual_seed(14)
    x = torch.randn(64, 5, generator=g)
    y = x[:, 0] * x[:, 1]
    y[[9, 35]] = -100.0  # corrupt rows: batches 1 and 4 of 8 (unshuffled)
    model = Robust()
    checkpoint = ModelCheckpoint(dirpath=root_dir / "ckpts", filename="{step}", every_n_train_steps=4, save_top_k=-1)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[checkpoint], enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=8))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "skipped": model.skipped,
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "files": sorted(p.name for p in (root_dir / "ckpts").iterdir())}
