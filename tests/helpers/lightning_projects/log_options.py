"""`self.log` keyword arguments seen in real code beyond the common ones: `rank_zero_only=True`
for a metric computed in `on_validation_epoch_end`, `add_dataloader_idx=False`,
`enable_graph=False`, and `log_dict(..., sync_dist_group=None)`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class Model(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.correct = 0
        self.total = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, enable_graph=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.correct += int((logits.argmax(-1) == y).sum())
        self.total += len(y)
        self.log("val_loss", F.cross_entropy(logits, y), add_dataloader_idx=False)

    def on_validation_epoch_end(self) -> None:
        self.log("val_acc", self.correct / max(self.total, 1), rank_zero_only=True)
        self.log_dict({"seen": float(self.total)}, sync_dist_group=None)
        self.correct = self.total = 0

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    L.seed_everything(77)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 6, generator=g)
    y = (x[:, 2] - x[:, 4] > 0).long()
    model = Model()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(x[:64], y[:64]), batch_size=8, shuffle=True),
                DataLoader(TensorDataset(x[64:], y[64:]), batch_size=8))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
