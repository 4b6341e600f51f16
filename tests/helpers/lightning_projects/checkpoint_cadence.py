"""Checkpoint cadences from Lightning's docs side by side: a top-k `ModelCheckpoint` on
`val_acc` (mode="max") every 2 epochs with `save_last=True` and a formatted `filename`, a
second one every 5 training steps keeping everything (`save_top_k=-1`), module
`on_save_checkpoint`/`on_load_checkpoint` adding an entry, then
`Model.load_from_checkpoint(best)` and `trainer.test(ckpt_path="best")`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import ModelCheckpoint


class Model(L.LightningModule):
    def __init__(self, lr: float = 0.03, width: int = 24) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(9, width), torch.nn.LeakyReLU(), torch.nn.Linear(width, 3))
        self.register_buffer("seen", torch.zeros(()))
        self.loaded_extra: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.seen += len(y)
        loss = F.cross_entropy(self(x), y, label_smoothing=0.1)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(-1) == y).float().mean())

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["extra"] = {"seen": int(self.seen), "note": "hello"}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.loaded_extra = checkpoint.get("extra")

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=1e-4)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 6) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(41)
    g = torch.Generator().manual_seed(12)
    x = torch.randn(150, 9, generator=g)
    y = torch.bucketize(x[:, 0] + x[:, 4], torch.tensor([-0.5, 0.5]))
    by_epoch = ModelCheckpoint(dirpath=root_dir / "by_epoch", filename="model-{epoch:02d}-{val_acc:.2f}", monitor="val_acc",
                               mode="max", save_top_k=2, every_n_epochs=2, save_last=True)
    by_step = ModelCheckpoint(dirpath=root_dir / "by_step", filename="{step}", every_n_train_steps=5, save_top_k=-1)
    model = Model()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[by_epoch, by_step], enable_progress_bar=False, enable_model_summary=False)
    train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16, shuffle=True)  # 6 steps an epoch
    val = DataLoader(TensorDataset(x[96:128], y[96:128]), batch_size=16)
    trainer.fit(model, train, val)
    fitted = dict(trainer.callback_metrics)
    best = Model.load_from_checkpoint(by_epoch.best_model_path)
    tested = trainer.test(dataloaders=DataLoader(TensorDataset(x[128:], y[128:]), batch_size=11), ckpt_path="best", verbose=False)[0]
    raw = torch.load(by_epoch.best_model_path, map_location="cpu", weights_only=False)
    return {"model": model, "trainer": trainer, "val": fitted, "test": dict(tested), "best_model": best,
            "best": Path(by_epoch.best_model_path).name, "best_score": float(by_epoch.best_model_score),
            "last": Path(by_epoch.last_model_path).name,
            "epoch_files": sorted(p.name for p in (root_dir / "by_epoch").iterdir()),
            "step_files": sorted(p.name for p in (root_dir / "by_step").iterdir()),
            "best_k": sorted((Path(k).name, float(v)) for k, v in by_epoch.best_k_models.items()),
            "extra": raw["extra"], "raw_epoch": raw["epoch"], "raw_step": raw["global_step"], "loaded_extra": best.loaded_extra,
            "seen": float(best.seen)}
