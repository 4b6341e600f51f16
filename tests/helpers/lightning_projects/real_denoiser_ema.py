"""A diffusion denoiser trained with EMA weight averaging, from mfm-v2
(github.com/PeterPotaptchik/mfm-v2: `src/distcfm/utils/training_denoiser.py`, class
`TrainingModuleDenoiser` and `DenoiserSamplingCallback`; `src/distcfm/utils/ema.py`,
`EMAWeightAveraging(WeightAveraging)`), written against Lightning 2 (`import ... as pl`).

Kept as written: metrics logged under `train/...` names (`train/total_loss`, `train/lr`,
one per loss term, the Trainer's own `train/*` namespace here), `on_before_optimizer_step`
logging the gradients' L2 norm every 10 steps, validation logging `val_ema/...` with
`on_epoch=True`, a `SequentialLR` (LinearLR warmup, then cosine) stepped per step, the EMA
callback's `should_update(step_idx, epoch_idx)` starting after a number of steps, and the
sampling callback drawing `torch.randn` in `on_train_batch_end` every few steps.
Substituted: the DiT is a small MLP on flattened 4x4 "images" taking the time as an input,
the loss is a plain noise-prediction loss on a variance-preserving schedule, the sampling
callback keeps each sample batch's mean instead of logging a torchvision grid to wandb, the
config object is a small namespace; the EMA starts after 6 steps (the project: 100); synthetic
data.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import trainer as pl
from torch.optim.swa_utils import get_ema_avg_fn
from torch.utils.data import DataLoader
from callbacks import Callback
from callbacks import WeightAveraging


class EMAWeightAveraging(WeightAveraging):
    def __init__(self, decay=0.999, start=100):
        super().__init__(avg_fn=get_ema_avg_fn(decay=decay))
        self.start = start

    def should_update(self, step_idx=None, epoch_idx=None):
        return (step_idx is not None) and (step_idx >= self.start)


class VPSDE:
    t_max = 1.0

    def get_coefficients(self, t):
        alpha = torch.cos(t * 1.5707963)
        return alpha, 1 - alpha ** 2


class Denoiser(torch.nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(dim + 1, hidden), torch.nn.SiLU(), torch.nn.Linear(hidden, dim))

    def forward(self, x, t):
        flat = x.flatten(1)
        return self.net(torch.cat([flat, t.reshape(-1, 1).to(flat.dtype)], dim=1)).view_as(x)


def make_loss_fn(sde):
    def loss_fn(model, x, step):
        t = torch.rand(x.shape[0], device=x.device) * 0.98 + 0.01
        alpha, var = sde.get_coefficients(t.view(-1, 1, 1, 1))
        noise = torch.randn_like(x)
        predicted = model(alpha * x + var.sqrt() * noise, t)
        mse = (predicted - noise).pow(2).mean()
        return {"mse": mse}, {"t_mean": t.mean()}
    return loss_fn


class TrainingModuleDenoiser(pl.LightningModule):
    def __init__(self, cfg, model, loss_fn, sde, inverse_scaler,):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.cfg = cfg
        self.inverse_scaler = inverse_scaler
        self.sde = sde
        self.grad_norms: list[float] = []

    def training_step(self, batch, batch_idx):
        try:
            x, _ = batch
        except:  # noqa: E722 - as written
            x = batch
        step = self.global_step

        losses, aux_losses = self.loss_fn(self.model, x, step)

        for name, loss in losses.items():
            self.log(f"train/{name}", loss, on_step=True, on_epoch=False, prog_bar=True, logger=True)
        for name, loss in aux_losses.items():
            self.log(f"train/{name}", loss, on_step=True, on_epoch=False, prog_bar=False, logger=True)

        total_loss = 0

        for name, loss in losses.items():
            total_loss += loss

        self.log("train/total_loss", total_loss, on_step=True, on_epoch=False, prog_bar=True, logger=True)
        current_lr = self.optimizers().param_groups[0]['lr']
        self.log("train/lr", current_lr, on_step=True, on_epoch=False, prog_bar=False, logger=True)
        return total_loss

    def on_before_optimizer_step(self, optimizer,):
        if self.global_step % 10 == 0:
            total_norm = torch.norm(torch.stack([
                p.grad.detach().norm(2)
                for p in self.parameters() if p.grad is not None
            ]))
            self.log("grad_l2_norm", total_norm, on_step=True, prog_bar=True)
            self.grad_norms.append(float(total_norm))

    def validation_step(self, batch, batch_idx):
        try:
            x, _ = batch
        except:  # noqa: E722 - as written
            x = batch

        ema_val_loss, ema_val_aux_losses = self.loss_fn(self.model, x, self.global_step)
        for name, loss in ema_val_loss.items():
            self.log(f"val_ema/{name}", loss, on_step=False, on_epoch=True, prog_bar=True, logger=True)
        for name, loss in ema_val_aux_losses.items():
            self.log(f"val_ema/{name}", loss, on_step=False, on_epoch=True, prog_bar=False, logger=True)
        ema_total_loss = sum(ema_val_loss.values())
        self.log("val_ema/total_loss", ema_total_loss, on_step=False, on_epoch=True, prog_bar=True, logger=True)

        return ema_total_loss

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.cfg.lr.val)

        if self.cfg.lr.scheduler == "cosine":
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
                optimizer,
                T_max=max(1, self.cfg.trainer.num_train_steps - self.cfg.lr.warmup_steps),
                eta_min=self.cfg.lr.min_lr
            )
        elif self.cfg.lr.scheduler == "constant":
            scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=float('inf'))
        else:
            raise ValueError(f"Unknown scheduler type: {self.cfg.lr.scheduler}")

        if self.cfg.lr.warmup_steps > 0:
            warmup_scheduler = torch.optim.lr_scheduler.LinearLR(
                optimizer, start_factor=0.1, end_factor=1.0, total_iters=self.cfg.lr.warmup_steps)
            scheduler = torch.optim.lr_scheduler.SequentialLR(
                optimizer, schedulers=[warmup_scheduler, scheduler], milestones=[self.cfg.lr.warmup_steps])

        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": scheduler,
                "interval": "step",
                "frequency": 1,
            }
        }


class DenoiserSamplingCallback(Callback):
    """Callback for generating denoised samples during training"""
    def __init__(self, cfg, sde, inverse_scaler, sampling_eps=1e-2):
        super().__init__()
        self.cfg = cfg
        self.sde = sde
        self.inverse_scaler = inverse_scaler
        self.sampling_eps = sampling_eps
        self.n_samples = 4
        self.n_steps = 5
        self.samples: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.cfg.sampling.every_n_steps == 0:
            self._run_sampling(pl_module)

    def _run_sampling(self, pl_module):
        image_shape = (self.cfg.dataset.img_channels, self.cfg.dataset.img_resolution, self.cfg.dataset.img_resolution)
        with torch.no_grad():
            x = torch.randn(self.n_samples, *image_shape, device=pl_module.device)
            time_steps = torch.linspace(self.sde.t_max - self.sampling_eps, self.sampling_eps, self.n_steps + 1,
                                        device=pl_module.device)
            for i in range(self.n_steps):
                t_now, t_next = time_steps[i], time_steps[i + 1]
                alpha_t, var_t = self.sde.get_coefficients(t_now)
                sigma_t = torch.sqrt(var_t)
                predicted_noise = pl_module.model(x, t_now.expand(self.n_samples))
                x_0_pred = (x - sigma_t * predicted_noise) / alpha_t
                alpha_t_next, var_t_next = self.sde.get_coefficients(t_next)
                sigma_t_next = torch.sqrt(var_t_next)
                x = alpha_t_next * x_0_pred + sigma_t_next * predicted_noise
            generated_images = self.inverse_scaler(x.cpu())
        self.samples.append(generated_images.mean(0))


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    pl.seed_everything(13)
    g = torch.Generator().manual_seed(2)
    images = torch.rand(56, 1, 4, 4, generator=g) * 2 - 1
    labels = torch.zeros(56, dtype=torch.long)
    data = list(zip(images, labels))
    cfg = SimpleNamespace(lr=SimpleNamespace(val=3e-3, scheduler="cosine", warmup_steps=4, min_lr=1e-4),
                          trainer=SimpleNamespace(num_train_steps=18), sampling=SimpleNamespace(every_n_steps=5),
                          dataset=SimpleNamespace(img_channels=1, img_resolution=4))
    sde = VPSDE()
    module = TrainingModuleDenoiser(cfg, Denoiser(), make_loss_fn(sde), sde, lambda x: (x + 1) / 2)
    ema = EMAWeightAveraging(decay=0.9, start=6)
    sampler = DenoiserSamplingCallback(cfg, sde, module.inverse_scaler)
    trainer = pl.Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=root_dir,
                         callbacks=[ema, sampler], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=2)
    trainer.fit(module, DataLoader(data[:48], batch_size=8, shuffle=True), DataLoader(data[48:], batch_size=8))
    return {"model": module, "trainer": trainer, "val": dict(trainer.callback_metrics), "samples": sampler.samples,
            "grad_norms": module.grad_norms}
