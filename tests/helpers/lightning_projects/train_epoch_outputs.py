"""Training-side epoch aggregation without a validation loader: `training_step` outputs kept
in a list and reduced in `on_train_epoch_end` (Lightning 2's replacement for
`training_epoch_end`), `EarlyStopping` on that training metric with
`check_on_train_epoch_end=True` and `min_delta`, `CosineAnnealingWarmRestarts` stepped per
batch, `self.trainer.estimated_stepping_batches` and `num_training_batches` read in
`on_fit_start`, an `IterableDataset` capped by `limit_train_batches` (an int)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

import trainer as L
from callbacks import EarlyStopping


class Stream(IterableDataset):
    """An endless stream of (x, y) pairs from a generator re-seeded per epoch by the caller."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.epoch = 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        w = torch.linspace(-1, 1, 6)
        while True:
            x = torch.randn(6, generator=g)
            yield x, (x @ w > 0).float()


class StreamModel(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.step_outputs: list[torch.Tensor] = []
        self.budget: tuple[Any, Any] | None = None
        self.epoch_means: list[float] = []

    def on_fit_start(self) -> None:
        self.budget = (self.trainer.estimated_stepping_batches, self.trainer.num_training_batches)

    def on_train_epoch_start(self) -> None:
        self.trainer.train_dataloader.dataset.epoch = self.current_epoch

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.binary_cross_entropy_with_logits(self.net(x).squeeze(-1), y)
        self.step_outputs.append(loss.detach())
        return loss

    def on_train_epoch_end(self) -> None:
        mean = torch.stack(self.step_outputs).mean()
        self.epoch_means.append(float(mean))
        self.log("train_epoch_loss", mean, prog_bar=True)
        self.step_outputs.clear()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.8)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=4, T_mult=2, eta_min=1e-3)
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 8, min_delta: float = 0.02) -> dict[str, Any]:
    L.seed_everything(61)
    model = StreamModel()
    stopper = EarlyStopping(monitor="train_epoch_loss", min_delta=min_delta, patience=1, check_on_train_epoch_end=True)
    trainer = L.Trainer(max_epochs=max_epochs, limit_train_batches=6, precision=precision, default_root_dir=root_dir,
                        logger=False, callbacks=[stopper], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(Stream(5), batch_size=10))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "budget": model.budget,
            "epoch_means": model.epoch_means, "stopped_epoch": stopper.stopped_epoch, "best": float(stopper.best_score),
            "lr": trainer.optimizers[0].param_groups[0]["lr"]}
