"""A GAN with manual optimization and different update frequencies: the discriminator every
batch, the generator every 2nd batch, `self.toggle_optimizer`, `self.clip_gradients` on the
discriminator, a per-epoch StepLR on each optimizer stepped by hand, `self.log` in manual mode,
and `on_train_epoch_end` writing an image grid through `self.logger.experiment`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from trainer.loggers import TensorBoardLogger


class WGANish(L.LightningModule):
    def __init__(self, latent_dim: int = 4, lr: float = 1e-3, generator_every: int = 2, clip: float = 0.5) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = torch.nn.Sequential(torch.nn.Linear(latent_dim, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh())
        self.discriminator = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (images,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(images.shape[0], self.hparams.latent_dim, device=self.device)

        self.toggle_optimizer(opt_d)
        real = self.discriminator(images)
        fake = self.discriminator(self(z).detach())
        d_loss = F.binary_cross_entropy_with_logits(real, torch.ones_like(real)) + F.binary_cross_entropy_with_logits(fake, torch.zeros_like(fake))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log("d_loss", d_loss, prog_bar=True)

        if (batch_idx + 1) % self.hparams.generator_every == 0:
            self.toggle_optimizer(opt_g)
            scored = self.discriminator(self(z))
            g_loss = F.binary_cross_entropy_with_logits(scored, torch.ones_like(scored))
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            opt_g.step()
            self.untoggle_optimizer(opt_g)
            self.log("g_loss", g_loss, prog_bar=True)

    def on_train_epoch_end(self) -> None:
        for scheduler in self.lr_schedulers():
            scheduler.step()
        g = torch.Generator().manual_seed(0)
        samples = self(torch.randn(4, self.hparams.latent_dim, generator=g).to(self.device)).detach()
        grid = samples.float().reshape(4, 1, 4, 4).clamp(-1, 1).add(1).div(2)
        self.logger.experiment.add_images("samples", grid, self.current_epoch)
        self.log("sample_std", samples.float().std())

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr, betas=(0.5, 0.999))
        schedulers = [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7) for opt in (opt_g, opt_d)]
        return [opt_g, opt_d], schedulers


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    L.seed_everything(13)
    g = torch.Generator().manual_seed(3)
    images = torch.tanh(torch.randn(60, 16, generator=g) + torch.linspace(-1, 1, 16))
    model = WGANish()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=TensorBoardLogger(save_dir=root_dir, name=None),
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(TensorDataset(images), batch_size=8, shuffle=True))  # 8 batches, the last of 4
    lrs = [opt.param_groups[0]["lr"] for opt in trainer.optimizers]
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "lrs": lrs}
