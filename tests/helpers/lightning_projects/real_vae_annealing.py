"""A VAE whose KL term is annealed by epoch and step, from ri-heme/vae-playground
(`src/vaeplayland/models/vae.py`: `VAE`, `LightningVAE`; `src/vaeplayland/models/loss.py`:
`compute_elbo`; `src/vaeplayland/models/encoders/simple_encoder.py`; `training/train.py`).

Kept as written: `LightningVAE.annealing_factor`, which reads `self.trainer.state.stage ==
RunningStage.TRAINING` (imported from Lightning's `trainer.states`), `self.trainer.current_epoch`,
`len(self.trainer.train_dataloader)` and `self.trainer.global_step` for its "linear", "sigmoid" and
"stairs" schedules; `step` logging every entry of the ELBO dict as
`self.log(f"{self.trainer.state.stage}_{key}", value)` (the names are what Python's f-string
makes of the enum: `RunningStage.TRAINING_elbo`, `RunningStage.VALIDATING_rec_loss`, ... on
Python 3.11 and later); `training_step(self, batch)` and
`validation_step(self, batch)` without `batch_idx`; `save_hyperparameters(ignore="vae")`; the
reparametrisation with `Normal(mu, scale).rsample()`; `SimpleEncoder` (Linear, ReLU, Dropout,
then one Linear to `2 * embedding_dim`, chunked in two); `fit(model, train_dataloader)` plus a
validation loader.
Substituted: the repo's `compute_elbo` at this commit takes no annealing factor and reads the
encoder's log-variance as a scale; here it multiplies the KL term by the factor (as
`LightningVAE` calls it) and takes `exp(0.5 * logvar)` as the scale; the decoder is the encoder's
mirror with a learned log-scale; the data are 64 random 12-dimensional points with a label;
Adam's learning rate is 1e-2 (1e-4 in the repo) so four epochs move the weights.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

import torch
from torch import nn, optim
from torch.distributions import Normal
from torch.utils.data import DataLoader, TensorDataset

import trainer as pl
from trainer.trainer.states import RunningStage


def compute_elbo(model: nn.Module, batch: Tuple[torch.Tensor, ...], kl_weight: float = 1.0,
                 annealing_factor: float = 1.0) -> Dict[str, torch.Tensor]:
    x, _ = batch
    px_loc, px_logscale, z, qz_loc, qz_logvar = model(batch)
    px = Normal(px_loc, px_logscale.exp())
    rec_loss = px.log_prob(x).sum(dim=[*range(1, x.dim())]).mean()
    qz = Normal(qz_loc, (0.5 * qz_logvar).exp())
    reg_loss = (qz.log_prob(z) - Normal(0.0, 1.0).log_prob(z)).sum(-1).mean()
    elbo = rec_loss - kl_weight * annealing_factor * reg_loss
    return dict(elbo=elbo, reg_loss=reg_loss, rec_loss=rec_loss, kl_weight=kl_weight)


class SimpleEncoder(nn.Module):
    def __init__(self, input_dim: int, compress_dims: Sequence[int], embedding_dim: int, dropout_rate: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        layer_dims = [input_dim, *compress_dims]
        for in_features, out_features in zip(layer_dims, layer_dims[1:]):
            layers.append(nn.Linear(in_features, out_features, bias=True))
            layers.append(nn.ReLU())
            if dropout_rate > 0:
                layers.append(nn.Dropout(p=dropout_rate))
        self.network = nn.Sequential(*layers, nn.Linear(layer_dims[-1], embedding_dim * 2, bias=True))

    def forward(self, batch: torch.Tensor) -> Sequence[torch.Tensor]:
        return torch.chunk(self.network(batch), chunks=2, dim=-1)


class VAE(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    @staticmethod
    def reparametrize(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        scale = (0.5 * logvar).exp()
        return Normal(mu, scale).rsample()

    def forward(self, batch: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        x, _ = batch
        z_mu, z_logvar = self.encoder(x)
        z = self.reparametrize(z_mu, z_logvar)
        x_mu, x_logsigma = self.decoder(z)
        return x_mu, x_logsigma, z, z_mu, z_logvar


class LightningVAE(pl.LightningModule):
    def __init__(self, vae: "VAE", kl_weight: float = 1.0, annealing_epochs: int = 20, annealing_schedule: str = "linear") -> None:
        super().__init__()
        self.vae = vae
        self.save_hyperparameters(ignore="vae")
        self.factors: list[tuple[str, float]] = []

    @property
    def annealing_factor(self) -> float:
        epoch = self.trainer.current_epoch
        if (
            self.trainer is not None
            and self.trainer.state.stage == RunningStage.TRAINING
            and epoch < self.hparams.annealing_epochs
        ):
            if self.hparams.annealing_schedule == "stairs":
                return epoch / self.hparams.annealing_epochs
            num_batches = len(self.trainer.train_dataloader)
            step = self.trainer.global_step
            slope = 1 / (self.hparams.annealing_epochs * num_batches)
            if self.hparams.annealing_schedule == "sigmoid":
                shift = 0.5
                return 1 / (1 + math.exp(10 * (shift - step * slope)))
            elif self.hparams.annealing_schedule == "linear":
                return step * slope
        return 1.0

    @property
    def kl_weight(self) -> float:
        return self.hparams.kl_weight

    def forward(self, batch: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return self.vae(batch)

    def configure_optimizers(self):
        return optim.Adam(self.parameters(), lr=1e-2)

    def step(self, batch: torch.Tensor) -> torch.Tensor:
        factor = self.annealing_factor
        self.factors.append((f"{self.trainer.state.stage}", factor))
        output = compute_elbo(self.vae, batch, self.kl_weight, factor)
        for key, value in output.items():
            self.log(f"{self.trainer.state.stage}_{key}", value)
        return -output["elbo"]

    def training_step(self, batch: torch.Tensor) -> torch.Tensor:
        return self.step(batch)

    def validation_step(self, batch: torch.Tensor) -> None:
        self.step(batch)


class Decoder(nn.Module):
    def __init__(self, embedding_dim: int, hidden: int, output_dim: int) -> None:
        super().__init__()
        self.network = nn.Sequential(nn.Linear(embedding_dim, hidden), nn.ReLU(), nn.Linear(hidden, output_dim))
        self.log_scale = nn.Parameter(torch.zeros(output_dim))

    def forward(self, z: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        loc = self.network(z)
        return loc, self.log_scale.expand_as(loc)


def main(root_dir: str | Path, precision: str = "32-true", schedule: str = "linear", max_epochs: int = 4) -> dict[str, Any]:
    pl.seed_everything(5)
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(80, 12, generator=g), torch.randint(0, 3, (80,), generator=g)
    vae = VAE(SimpleEncoder(12, [16], 3, dropout_rate=0.1), Decoder(3, 16, 12))
    model = LightningVAE(vae, kl_weight=1.0, annealing_epochs=3, annealing_schedule=schedule)
    trainer = pl.Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=str(root_dir),
                         logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=1)
    stages = [f"{trainer.state.stage}"]
    trainer.fit(model, DataLoader(TensorDataset(x[:64], y[:64]), batch_size=16, shuffle=True),
                DataLoader(TensorDataset(x[64:], y[64:]), batch_size=8))
    stages.append(f"{trainer.state.stage}")
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "factors": model.factors,
            "logged": dict(trainer.logged_metrics), "hparams": dict(model.hparams), "stages": stages,
            "state": (str(trainer.state.fn), str(trainer.state.status), trainer.state.finished)}
