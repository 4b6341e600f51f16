"""Train, stop, resume the way tutorials do: a `ModelCheckpoint(every_n_epochs=1,
save_last=True, filename="{epoch}-{val_loss:.3f}", monitor="val_loss", save_top_k=2)`, a first
`fit` to `max_epochs=2`, then a new model and Trainer with `max_epochs=4` and
`fit(..., ckpt_path=<last.ckpt>)`. A `StepLR`, Adam's state and a callback with
`state_dict`/`load_state_dict` must all come back. `main(..., stop_at=None)` trains the
same run in one go, for comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import Callback, ModelCheckpoint


class BatchCounter(Callback):
    """A stateful callback: counts training batches over the whole run, saved in checkpoints."""

    def __init__(self) -> None:
        self.batches = 0
        self.loaded: dict[str, Any] | None = None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded = dict(state_dict)
        self.batches = state_dict["batches"]


class Model(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), prog_bar=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)}


def data(shuffle: bool) -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(80, 6, generator=g)
    y = (x[:, 0] * x[:, 1] > 0).long()
    return (DataLoader(TensorDataset(x[:64], y[:64]), batch_size=8, shuffle=shuffle),
            DataLoader(TensorDataset(x[64:], y[64:]), batch_size=8))


def make_trainer(root_dir: Path, precision: str, max_epochs: int) -> tuple[Any, ModelCheckpoint, BatchCounter]:
    checkpoint = ModelCheckpoint(dirpath=root_dir / "ckpts", filename="{epoch}-{val_loss:.3f}", monitor="val_loss",
                                 save_top_k=2, every_n_epochs=1, save_last=True)
    counter = BatchCounter()
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[checkpoint, counter], enable_progress_bar=False, enable_model_summary=False)
    return trainer, checkpoint, counter


def main(root_dir: str | Path, precision: str = "32-true", stop_at: int | None = 2, max_epochs: int = 4,
         shuffle: bool = False) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(5)
    model = Model()
    if stop_at is not None:
        first, checkpoint, _ = make_trainer(root_dir, precision, stop_at)
        first.fit(model, *data(shuffle))
        L.seed_everything(5)
        model = Model()
        trainer, checkpoint, counter = make_trainer(root_dir, precision, max_epochs)
        trainer.fit(model, *data(shuffle), ckpt_path=str(root_dir / "ckpts" / "last.ckpt"))
    else:
        trainer, checkpoint, counter = make_trainer(root_dir, precision, max_epochs)
        trainer.fit(model, *data(shuffle))
    files = sorted(p.name for p in (root_dir / "ckpts").iterdir())
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "files": files,
            "best": Path(checkpoint.best_model_path).name, "best_score": float(checkpoint.best_model_score),
            "batches": counter.batches, "loaded": counter.loaded, "lr": trainer.optimizers[0].param_groups[0]["lr"]}
