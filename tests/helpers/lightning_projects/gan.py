"""Lightning's GAN template, small: manual optimization with two Adam optimizers,
`toggle_optimizer`/`untoggle_optimizer`, `manual_backward`, and noise drawn in the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from trainer.loggers import CSVLogger


class Generator(torch.nn.Module):
    def __init__(self, latent_dim: int = 4, out: int = 2) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(latent_dim, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, out))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z)


class Discriminator(torch.nn.Module):
    def __init__(self, size: int = 2) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(
            torch.nn.Linear(size, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1), torch.nn.Sigmoid()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class GAN(L.LightningModule):
    def __init__(self, latent_dim: int = 4, lr: float = 0.0002, b1: float = 0.5, b2: float = 0.999) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim)
        self.discriminator = Discriminator()
        self.validation_z = torch.randn(8, latent_dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def adversarial_loss(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch: Any) -> None:
        (points,) = batch
        optimizer_g, optimizer_d = self.optimizers()
        z = torch.randn(points.shape[0], self.hparams.latent_dim).type_as(points)

        self.toggle_optimizer(optimizer_g)
        valid = torch.ones(points.size(0), 1).type_as(points)
        g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        optimizer_g.step()
        optimizer_g.zero_grad()
        self.untoggle_optimizer(optimizer_g)

        self.toggle_optimizer(optimizer_d)
        real_loss = self.adversarial_loss(self.discriminator(points), valid)
        fake = torch.zeros(points.size(0), 1).type_as(points)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        optimizer_d.step()
        optimizer_d.zero_grad()
        self.untoggle_optimizer(optimizer_d)

    def configure_optimizers(self) -> Any:
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []

    def on_train_epoch_end(self) -> None:
        sample = self(self.validation_z.type_as(self.generator.model[0].weight))
        self.log("sample_mean", sample.mean())


def points(n: int = 64) -> TensorDataset:
    """`n` 2-d points around (2, 2), drawn from a generator of their own."""
    g = torch.Generator().manual_seed(5)
    return TensorDataset(torch.randn(n, 2, generator=g) * 0.5 + 2.0)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    L.seed_everything(42)
    model = GAN()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        precision=precision,
        default_root_dir=root_dir,
        logger=CSVLogger(root_dir),
        log_every_n_steps=1,
        enable_progress_bar=False,
    )
    trainer.fit(model, DataLoader(points(), batch_size=16, shuffle=True))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
