"""A tiny DCGAN-shaped pair (generator with BatchNorm, discriminator with dropout), its
manual-optimization Module, and the hand-written loop it must equal; and the same pair
written Lightning's way (`LightningGAN`: zero_grad before manual_backward, no toggling).

The hand-written loop follows PyTorch's AMP recipe for several models, losses and
optimizers: one GradScaler; per optimizer scale/backward, unscale_, clip, scaler.step; in
this DCGAN order (D backward, D step, G backward, G step) scaler.update() after each step,
before the next backward (the Trainer's lazy update; Lightning's MixedPrecision plugin does
the same); a scheduler stepped only when its optimizer really stepped.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}
Z = 4


def generator() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(Z, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def discriminator() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.LeakyReLU(0.2), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))


def make_points(n: int = 44, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    centers = torch.tensor([[2.0, 0.0], [-2.0, 1.0]])
    which = torch.randint(0, 2, (n,), generator=g)
    return TensorDataset(centers[which] + 0.3 * torch.randn(n, 2, generator=g))


def points_loader(data: TensorDataset, batch_size: int = 4) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(7))


def bce(logits: torch.Tensor, target: float) -> torch.Tensor:
    return torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), torch.full_like(logits.float(), target))


class GAN(Module):
    """Manual optimization: a discriminator step, then a generator step, each batch."""

    def __init__(self, clip: float | None = None, accumulate: int = 1, blow_up_at: tuple[int, ...] = (), fused: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = generator()
        self.discriminator = discriminator()
        self.clip, self.accumulate, self.blow_up_at, self.fused = clip, accumulate, set(blow_up_at), fused
        self.calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt_g, opt_d = self.optimizers()
        sched_g, sched_d = self.lr_schedulers()
        (real,) = batch
        fake = self.generator(torch.randn(real.shape[0], Z, device=real.device))
        boundary = (batch_idx + 1) % self.accumulate == 0

        self.toggle_optimizer(opt_d)
        d_loss = (bce(self.discriminator(real), 1.0) + bce(self.discriminator(fake.detach()), 0.0)) / self.accumulate
        if self.calls in self.blow_up_at:
            d_loss = d_loss * float("inf")
        self.manual_backward(d_loss)
        if boundary:
            if self.clip is not None:
                self.clip_gradients(opt_d, gradient_clip_val=self.clip, gradient_clip_algorithm="norm")
            opt_d.step()
            if opt_d.stepped:
                sched_d.step()
            opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

        self.toggle_optimizer(opt_g)
        g_loss = bce(self.discriminator(fake), 1.0)
        self.manual_backward(g_loss)
        opt_g.step()
        if opt_g.stepped:
            sched_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        self.calls += 1
        self.log("train/d_loss", d_loss.detach())
        return {"loss": g_loss.detach()}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["gan_calls"] = self.calls  # the module's own state travels in the checkpoint

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls = checkpoint["gan_calls"]

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.5, 0.999), fused=self.fused or None)
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999), fused=self.fused or None)
        sched_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=5, gamma=0.5)
        sched_d = torch.optim.lr_scheduler.StepLR(opt_d, step_size=5, gamma=0.5)
        return [opt_g, opt_d], [sched_g, sched_d]


class LightningGAN(Module):
    """Lightning's manual-optimization GAN: zero_grad before manual_backward, no toggling, so
    the generator's forward runs through the discriminator that just stepped."""

    def __init__(self, blow_up_at: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.discriminator = generator(), discriminator()
        self.blow_up_at = set(blow_up_at)
        self.calls = 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt_g, opt_d = self.optimizers()
        (real,) = batch
        fake = self.generator(torch.randn(real.shape[0], Z, device=real.device))
        d_loss = bce(self.discriminator(real), 1.0) + bce(self.discriminator(fake.detach()), 0.0)
        if self.calls in self.blow_up_at:
            d_loss = d_loss * float("inf")
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        g_loss = bce(self.discriminator(fake), 1.0)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.calls += 1
        return g_loss.detach()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["gan_calls"] = self.calls

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.calls = checkpoint["gan_calls"]

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        return [opt_g, opt_d]


def make_gan(seed: int = 0, **kwargs: Any) -> GAN:
    torch.manual_seed(seed)
    return GAN(**kwargs)


def reference_gan(model: GAN, loader: DataLoader, *, precision: str = "fp32", epochs: int = 1) -> dict[str, Any]:
    """The hand-written loop over the same modules (the Module is used only as a container)."""
    G, D = model.generator, model.discriminator
    (opt_g, opt_d), (sched_g, sched_d) = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    dtype = DTYPES[precision]
    steps = 0
    calls = 0
    model.train()

    def autocast() -> Any:
        return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def step(opt: torch.optim.Optimizer) -> bool:
        scaler.step(opt)
        stepped = True
        if precision == "amp":
            found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
            stepped = not any(bool(t.item()) for t in found.values())
        scaler.update()  # after each step: the next backward scales with the updated scale
        return stepped

    for _ in range(epochs):
        for batch_idx, (real,) in enumerate(loader):
            boundary = (batch_idx + 1) % model.accumulate == 0
            with autocast():
                fake = G(torch.randn(real.shape[0], Z))
            for p in G.parameters():
                p.requires_grad_(False)
            with autocast():
                d_loss = (bce(D(real), 1.0) + bce(D(fake.detach()), 0.0)) / model.accumulate
            if calls in model.blow_up_at:
                d_loss = d_loss * float("inf")
            scaler.scale(d_loss).backward()
            if boundary:
                if model.clip is not None:
                    scaler.unscale_(opt_d)
                    torch.nn.utils.clip_grad_norm_(D.parameters(), model.clip)
                if step(opt_d):
                    sched_d.step()
                steps += 1
                opt_d.zero_grad()
            for p in G.parameters():
                p.requires_grad_(True)
            for p in D.parameters():
                p.requires_grad_(False)
            with autocast():
                g_loss = bce(D(fake), 1.0)
            scaler.scale(g_loss).backward()
            if step(opt_g):
                sched_g.step()
            steps += 1
            opt_g.zero_grad()
            for p in D.parameters():
                p.requires_grad_(True)
            calls += 1
    return {"steps": steps, "scale": scaler.get_scale() if precision == "amp" else None,
            "lr_g": opt_g.param_groups[0]["lr"], "lr_d": opt_d.param_groups[0]["lr"]}
