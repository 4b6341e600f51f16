"""A match-outcome predictor trained by hand (manual optimization), from a public research
repository (found by code search, file id 41550160301: `class Predictor(LightningModule)` with
`automatic_optimization = False`).

Kept as written: `manual_backward(loss, retain_graph=True)` between `opt.zero_grad()` and
`opt.step()`, `self.log_dict({...}, on_epoch=True, prog_bar=True, rank_zero_only=True)` from a
shared `train_val_get`, the scheduler stepped by hand in `on_train_epoch_end` (the
`ReduceLROnPlateau` branch reads `trainer.callback_metrics["val_loss"]`), `get_last_lr()`
logged in `on_validation_epoch_end`, `logger.log_graph(self, self.example_input_array)` in
`on_fit_start`, and `configure_optimizers` returning `{'optimizer', 'lr_scheduler'}`.
Substituted: `bayesian_torch`'s `dnn_to_bnn` is left out (the layers stay plain `nn.Linear`),
the project's `positional_encoding` is a small sin/cos encoding written here, and the data are
synthetic; sizes shrunk. `scheduler="plateau"` swaps the `ExponentialLR` for the
`ReduceLROnPlateau` the file keeps commented out (its `on_train_epoch_end` handles both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as tf
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningModule
import trainer as pl
from trainer.loggers import TensorBoardLogger


def positional_encoding(x: torch.Tensor, sigma: float, size: int) -> torch.Tensor:
    freqs = sigma ** (torch.arange(size, dtype=x.dtype) / size)
    angles = x.unsqueeze(-1) * freqs
    return torch.cat([angles.sin(), angles.cos()], dim=-1).flatten(-2)


class Predictor(LightningModule):

    def __init__(self, init_size: int = 6, latent_size: int = 16, lr: float = 1e-2, weight_decay: float = 0.0,
                 encoded_sz: int = 3, sigma: float = 10., scheduler_gamma: float = .7, betas: tuple[float, float] = (.9, .99),
                 scheduler: str = "exponential", *args: Any, **kwargs: Any):
        super().__init__()
        self.init_size = init_size
        self.latent_size = latent_size
        self.output_size = 1
        self.automatic_optimization = False
        self.lr = lr
        self.weight_decay = weight_decay
        self.scheduler_gamma = scheduler_gamma
        self.betas = betas
        self.encoded_size = self.init_size * 2 * encoded_sz
        self.e_sz = encoded_sz
        self.sigma = sigma
        self.scheduler = scheduler
        self.lrs: list[float] = []

        self.apply_opp = nn.Sequential(
            nn.Linear(self.encoded_size * 2, self.latent_size),
            nn.SiLU(),
            nn.Linear(self.latent_size, self.output_size),
            nn.Sigmoid()
        )

    def forward(self, x, y):
        ex = positional_encoding(x, self.sigma, self.e_sz)
        ey = positional_encoding(y, self.sigma, self.e_sz)
        x = self.apply_opp(torch.cat([ex, ey], dim=-1))
        return x

    def loss_function(self, y, y_pred):
        return tf.binary_cross_entropy(y, y_pred)

    def on_fit_start(self) -> None:
        if self.trainer.is_global_zero and self.logger:
            self.logger.log_graph(self, self.example_input_array)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        train_loss = self.train_val_get(batch, batch_idx)
        opt.zero_grad()
        self.manual_backward(train_loss, retain_graph=True)
        opt.step()

    def validation_step(self, batch, batch_idx):
        self.train_val_get(batch, batch_idx, 'val')

    def on_train_epoch_end(self) -> None:
        sch = self.lr_schedulers()

        # If the selected scheduler is a ReduceLROnPlateau scheduler.
        if isinstance(sch, torch.optim.lr_scheduler.ReduceLROnPlateau):
            sch.step(self.trainer.callback_metrics["val_loss"])
        else:
            sch.step()
        self.lrs.append(self.optimizers().param_groups[0]["lr"])

    def on_validation_epoch_end(self) -> None:
        self.log('lr', self.lr_schedulers().get_last_lr()[0], prog_bar=True, rank_zero_only=True)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(),
                                      lr=self.lr,
                                      weight_decay=self.weight_decay,
                                      betas=self.betas,
                                      eps=1e-7)
        if self.scheduler_gamma is None:
            return optimizer
        if self.scheduler == "plateau":
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, cooldown=1, patience=0,
                                                                   factor=self.scheduler_gamma, threshold=1e-5)
        else:
            scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=self.scheduler_gamma)

        return {'optimizer': optimizer, 'lr_scheduler': scheduler}

    def train_val_get(self, batch, batch_idx, kind='train'):
        team, opp, targets = batch

        results = self.forward(team, opp)
        train_loss = self.loss_function(results, targets)

        self.log_dict({f'{kind}_loss': train_loss}, on_epoch=True,
                      prog_bar=True, rank_zero_only=True)
        return train_loss


def main(root_dir: str | Path, precision: str = "32-true", scheduler: str = "exponential", max_epochs: int = 4) -> dict[str, Any]:
    pl.seed_everything(3)
    g = torch.Generator().manual_seed(17)
    team, opp = torch.rand(120, 6, generator=g), torch.rand(120, 6, generator=g)
    targets = ((team.sum(-1) - opp.sum(-1)) > 0).float().unsqueeze(-1)
    data = TensorDataset(team, opp, targets)
    train, val = torch.utils.data.Subset(data, range(96)), torch.utils.data.Subset(data, range(96, 120))
    model = Predictor(scheduler=scheduler)
    trainer = pl.Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=root_dir,
                         logger=TensorBoardLogger(root_dir, name="tb", log_graph=True), log_every_n_steps=2,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True), DataLoader(val, batch_size=12))
    val_out = trainer.validate(model, DataLoader(val, batch_size=12), verbose=False)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "validate": val_out,
            "lrs": model.lrs, "lr": trainer.optimizers[0].param_groups[0]["lr"]}
