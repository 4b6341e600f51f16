"""A regressor validated and tested on two dataloaders at once (an in-distribution and a
shifted set), the way Lightning's docs show it: `validation_step(batch, batch_idx,
dataloader_idx=0)`, metric names suffixed `/dataloader_idx_N` by the logger, `log_dict` with
`prog_bar=True`, and `trainer.test` returning one dict per loader. `loaders="train"` trains on
a dict of two loaders instead (Lightning's combined batch `{"a": ..., "b": ...}`), and
`loaders="predict"` predicts over a list of two loaders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.seen: list[tuple[str, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if isinstance(batch, dict):  # several training loaders: one batch from each
            loss = sum(F.mse_loss(self(x), y) for x, y in batch.values())
        else:
            x, y = batch
            loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        pred = self(x)
        self.seen.append(("val", dataloader_idx))
        self.log_dict({"val_mse": F.mse_loss(pred, y), "val_mae": F.l1_loss(pred, y)}, prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.seen.append(("test", dataloader_idx))
        self.log("test_mse", F.mse_loss(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        self.seen.append(("predict", dataloader_idx))
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def make(n: int, seed: int, shift: float = 0.0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g) + shift
    return TensorDataset(x, x.sum(-1).sin() + 0.1 * torch.randn(n, generator=g))


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3, loaders: str = "eval") -> dict[str, Any]:
    L.seed_everything(7)
    model = Regressor()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    if loaders == "train":
        trainer.fit(model, {"a": DataLoader(make(64, 0), batch_size=8, shuffle=True), "b": DataLoader(make(40, 5, 0.5), batch_size=8)})
        return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
    if loaders == "predict":
        predictions = trainer.predict(model, [DataLoader(make(16, 3), batch_size=8), DataLoader(make(12, 4, 1.0), batch_size=4)])
        return {"model": model, "trainer": trainer, "predictions": predictions, "seen": model.seen}
    val = [DataLoader(make(24, 1), batch_size=8), DataLoader(make(20, 2, shift=0.5), batch_size=8)]
    trainer.fit(model, DataLoader(make(64, 0), batch_size=8, shuffle=True), val)
    fitted = dict(trainer.callback_metrics)
    tested = trainer.test(model, dataloaders=[DataLoader(make(16, 3), batch_size=8), DataLoader(make(12, 4, 1.0), batch_size=4)],
                          verbose=False)
    return {"model": model, "trainer": trainer, "val": fitted, "test": [dict(d) for d in tested], "seen": model.seen}
