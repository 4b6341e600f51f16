"""A variational autoencoder: KL annealing from `self.current_epoch` and `self.global_step`,
the reparameterisation noise drawn from torch's stream, validation outputs kept in a list on
the module and aggregated in `on_validation_epoch_end` (Lightning 2's pattern),
`self.logger.experiment.add_histogram`/`add_scalar` on a TensorBoardLogger,
`save_hyperparameters()`, ModelCheckpoint on `val_elbo`, and `load_from_checkpoint` of the best."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import ModelCheckpoint
from trainer.loggers import TensorBoardLogger


class VAE(L.LightningModule):
    def __init__(self, features: int = 10, latent: int = 2, hidden: int = 16, lr: float = 5e-3, anneal_steps: int = 12) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2 * latent))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(latent, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, features))
        self.validation_outputs: list[dict[str, torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, log_var = self.encoder(x).chunk(2, dim=-1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * log_var)
        return self.decoder(z), mu, log_var

    def losses(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        reconstruction, mu, log_var = self(x)
        rec = F.mse_loss(reconstruction.float(), x, reduction="none").sum(-1).mean()
        kl = (-0.5 * (1 + log_var - mu.pow(2) - log_var.exp()).sum(-1)).mean()
        return rec, kl.float()

    def kl_weight(self) -> float:
        return min(1.0, (self.global_step + 1) / self.hparams.anneal_steps) * (0.5 if self.current_epoch == 0 else 1.0)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        rec, kl = self.losses(x)
        beta = self.kl_weight()
        loss = rec + beta * kl
        self.log_dict({"train_rec": rec, "train_kl": kl, "beta": beta}, on_step=True, on_epoch=True)
        if self.global_step % 4 == 0:
            self.logger.experiment.add_scalar("beta_raw", beta, self.global_step)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        rec, kl = self.losses(x)
        self.validation_outputs.append({"rec": rec, "kl": kl, "n": torch.tensor(x.shape[0])})

    def on_validation_epoch_end(self) -> None:
        n = torch.stack([o["n"] for o in self.validation_outputs]).float()
        rec = (torch.stack([o["rec"] for o in self.validation_outputs]) * n).sum() / n.sum()
        kl = (torch.stack([o["kl"] for o in self.validation_outputs]) * n).sum() / n.sum()
        self.log("val_elbo", rec + kl, prog_bar=True)
        self.log("val_kl", kl)
        self.validation_outputs.clear()
        if not self.trainer.sanity_checking:
            self.logger.experiment.add_histogram("decoder_weight", self.decoder[0].weight, self.current_epoch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def make_data() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(31)
    z = torch.randn(120, 2, generator=g)
    x = torch.tanh(z @ torch.randn(2, 10, generator=g)) + 0.05 * torch.randn(120, 10, generator=g)
    return TensorDataset(x[:96]), TensorDataset(x[96:])


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4) -> dict[str, Any]:
    L.seed_everything(5)
    train, val = make_data()
    model = VAE()
    checkpoint = ModelCheckpoint(monitor="val_elbo", filename="vae-{epoch:02d}-{val_elbo:.3f}")
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=TensorBoardLogger(save_dir=root_dir, name="tb"),
        callbacks=[checkpoint],
        log_every_n_steps=3,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True), DataLoader(val, batch_size=10))
    validated = dict(trainer.callback_metrics)
    best = type(model).load_from_checkpoint(checkpoint.best_model_path)
    return {"model": model, "trainer": trainer, "val": validated, "best": best, "checkpoint": checkpoint}
