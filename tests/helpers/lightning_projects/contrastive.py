"""A SimCLR-like model: two views of each batch made with noise drawn from torch's stream in
training_step, an NT-Xent loss with a temperature, a projection head, and
`configure_optimizers` returning a dict with `{"scheduler": CosineAnnealingLR, "interval": "epoch"}`;
run under `precision="bf16-mixed"` by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


def nt_xent(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    z = F.normalize(torch.cat([a, b]).float(), dim=1)
    similarity = z @ z.T / temperature
    n = a.shape[0]
    similarity = similarity.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return F.cross_entropy(similarity, targets)


class SimCLR(L.LightningModule):
    def __init__(self, features: int = 12, hidden: int = 24, projection: int = 8, temperature: float = 0.2,
                 lr: float = 3e-3, max_epochs: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden))
        self.projector = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(hidden, projection))

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        mask = (torch.rand_like(x) > 0.2).to(x.dtype)
        return x * mask + 0.1 * torch.randn_like(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        a, b = self.projector(self.encoder(self.augment(x))), self.projector(self.encoder(self.augment(x)))
        loss = nt_xent(a, b, self.hparams.temperature)
        self.log("train_nt_xent", loss, prog_bar=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        embedding = F.normalize(self.encoder(x).float(), dim=1)
        nearest = (embedding @ embedding.T).fill_diagonal_(-2).argmax(dim=1)
        self.log("val_knn_acc", (y[nearest] == y).float().mean())

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-4)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=self.hparams.max_epochs)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def make_data() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(41)
    centers = torch.randn(4, 12, generator=g) * 2
    labels = torch.randint(0, 4, (112,), generator=g)
    x = centers[labels] + torch.randn(112, 12, generator=g)
    return TensorDataset(x[:80], labels[:80]), TensorDataset(x[80:], labels[80:])


def main(root_dir: str | Path, precision: str = "bf16-mixed", max_epochs: int = 4) -> dict[str, Any]:
    L.seed_everything(8)
    train, val = make_data()
    model = SimCLR(max_epochs=max_epochs)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True, drop_last=True), DataLoader(val, batch_size=16))
    validated = dict(trainer.callback_metrics)
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    return {"model": model, "trainer": trainer, "val": validated, "lr": lr}
