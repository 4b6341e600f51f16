"""A BatchNorm regressor with StochasticWeightAveraging, `deterministic=True`,
`gradient_clip_algorithm="value"`, `log_every_n_steps=1` and a CSVLogger, a StepLR per epoch
that SWA replaces with its own schedule from `swa_epoch_start` on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import StochasticWeightAveraging
from trainer.loggers import CSVLogger


class BNRegressor(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_mse", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_mse", F.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)]


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 5, clip_algorithm: str = "value") -> dict[str, Any]:
    L.seed_everything(37)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(100, 6, generator=g)
    y = (x[:, :1] * 2 - x[:, 1:2]).tanh() + 0.1 * torch.randn(100, 1, generator=g)
    swa = StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=3, annealing_epochs=1)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=CSVLogger(root_dir, name="csv"),
        deterministic=True,
        gradient_clip_val=0.1,
        gradient_clip_algorithm=clip_algorithm,
        log_every_n_steps=1,
        callbacks=[swa],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = BNRegressor()
    trainer.fit(model, DataLoader(TensorDataset(x[:80], y[:80]), batch_size=12, shuffle=True),
                DataLoader(TensorDataset(x[80:], y[80:]), batch_size=10))
    validated = dict(trainer.callback_metrics)
    result = trainer.validate(model, DataLoader(TensorDataset(x[80:], y[80:]), batch_size=10), verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "validate": result}
