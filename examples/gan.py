"""A GAN with manual optimization: two optimizers, one GradScaler, schedulers held on skips.

The generator learns a 2-D mixture of three Gaussians; no download, a few seconds on a CPU:

    python examples/gan.py                  # fp32
    python examples/gan.py --precision amp  # float16 autocast + one GradScaler for both optimizers

The structure is PyTorch's DCGAN example (discriminator step on real and detached fake
samples, then a generator step), written the Lightning 2 way (see docs/manual_optimization.md).
"""

from __future__ import annotations

import argparse
import math

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer

LATENT = 8


def mixture(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    angles = torch.tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3])
    centers = torch.stack([angles.cos(), angles.sin()], dim=1) * 2
    which = torch.randint(0, 3, (n,), generator=g)
    return TensorDataset(centers[which] + 0.2 * torch.randn(n, 2, generator=g))


class GAN(Module):
    def __init__(self, hidden: int = 64, lr: float = 2e-3) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.lr = lr
        self.generator = torch.nn.Sequential(
            torch.nn.Linear(LATENT, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2)
        )
        self.discriminator = torch.nn.Sequential(
            torch.nn.Linear(2, hidden), torch.nn.LeakyReLU(0.2), torch.nn.Linear(hidden, 1)
        )

    @staticmethod
    def bce(logits: torch.Tensor, target: float) -> torch.Tensor:
        logits = logits.float()
        return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))

    def training_step(self, batch, batch_idx):
        opt_g, opt_d = self.optimizers()
        sched_g, sched_d = self.lr_schedulers()
        (real,) = batch
        fake = self.generator(torch.randn(len(real), LATENT, device=real.device))

        self.toggle_optimizer(opt_d)
        d_loss = self.bce(self.discriminator(real), 1.0) + self.bce(self.discriminator(fake.detach()), 0.0)
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=1.0)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

        self.toggle_optimizer(opt_g)
        g_loss = self.bce(self.discriminator(fake), 1.0)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        for opt, sched in ((opt_d, sched_d), (opt_g, sched_g)):
            if opt.stepped:  # held when amp skipped the step
                sched.step()
        self.log("train/d_loss", d_loss, prog_bar=True)
        self.log("train/g_loss", g_loss, prog_bar=True)
        return {"loss": (d_loss + g_loss).detach()}

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        sched_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=500, gamma=0.5)
        sched_d = torch.optim.lr_scheduler.StepLR(opt_d, step_size=500, gamma=0.5)
        return [opt_g, opt_d], [sched_g, sched_d]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "amp", "bf16"])
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GAN()
    trainer = Trainer(precision=args.precision, max_epochs=args.epochs, log_every_n_steps=20, root_dir="runs/gan")
    trainer.fit(model, DataLoader(mixture(2048), batch_size=64, shuffle=True, drop_last=True))
    model.eval()
    with torch.no_grad():
        samples = model.generator(torch.randn(1000, LATENT))
    radius = samples.norm(dim=1).mean().item()
    print(f"optimizer steps: {trainer.global_step}; mean radius of generated points: {radius:.2f} (data: 2.00)")


if __name__ == "__main__":
    main()
