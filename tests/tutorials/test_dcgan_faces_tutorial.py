"""beginner_source/dcgan_faces_tutorial.py, ported to a `Module` with manual optimization.

The tutorial: `Generator` and `Discriminator` initialised by `weights_init` through `.apply`,
`BCELoss`, a `fixed_noise` batch drawn after both networks, two Adam optimizers (lr 2e-4,
beta1 0.5); per batch `netD.zero_grad()`, the real batch's loss backward, a fake batch from
fresh noise, its loss backward on `fake.detach()`, `optimizerD.step()`; `netG.zero_grad()`, the
generator's loss through the updated discriminator backward, `optimizerG.step()`; the stats line
every `PRINT_EVERY` iterations, both losses kept per iteration, and every `SNAPSHOT_EVERY`
iterations and at the very last one the generator's output on `fixed_noise` under `no_grad`
(in train mode: its batch norms use and update batch statistics, as in the tutorial).

The port, as a Lightning user writes it: the two optimizers from `configure_optimizers`,
`manual_backward` for each backward, the snapshot in `on_train_batch_end`. Weights (batch-norm
statistics included), printed lines, loss lists and snapshots are the tutorial's (`torch.equal`).

Differences from the tutorial, for speed and with no download: CelebA is 16 random 3x64x64
images in [-1, 1] (the networks need 64x64); `nz` 8, `ngf`/`ndf` 4 instead of 100/64/64; batch
8 instead of 128; 2 epochs; `num_workers=0`; no `torch.use_deterministic_algorithms(True)` (a
process-wide switch; the CPU kernels here are deterministic) and no `make_grid` (torchvision).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
manualSeed, nc, nz, ngf, ndf, num_epochs, lr, beta1 = 999, 3, 8, 4, 4, 2, 0.0002, 0.5
PRINT_EVERY, SNAPSHOT_EVERY = 1, 3
real_label, fake_label = 1., 0.


def weights_init(m: nn.Module) -> None:
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
        )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.main(input)


class DCGAN(Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.netG = Generator()
        self.netG.apply(weights_init)
        self.netD = Discriminator()
        self.netD.apply(weights_init)
        self.criterion = nn.BCELoss()
        self.fixed_noise = torch.randn(8, nz, 1, 1)
        self.img_list: list[torch.Tensor] = []
        self.G_losses: list[float] = []
        self.D_losses: list[float] = []
        self.printed: list[str] = []
        self.iters = 0

    def step(self, data: Any, optimizerD: Any, optimizerG: Any, backward: Any) -> tuple[torch.Tensor, ...]:
        """One iteration of the tutorial's loop, up to its stats line."""
        self.netD.zero_grad()
        real_cpu = data[0]
        b_size = real_cpu.size(0)
        label = torch.full((b_size,), real_label, dtype=torch.float)
        output = self.netD(real_cpu).view(-1)
        errD_real = self.criterion(output, label)
        backward(errD_real)
        D_x = output.mean().item()
        noise = torch.randn(b_size, nz, 1, 1)
        fake = self.netG(noise)
        label.fill_(fake_label)
        output = self.netD(fake.detach()).view(-1)
        errD_fake = self.criterion(output, label)
        backward(errD_fake)
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()
        self.netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = self.netD(fake).view(-1)
        errG = self.criterion(output, label)
        backward(errG)
        D_G_z2 = output.mean().item()
        optimizerG.step()
        return errD, errG, D_x, D_G_z1, D_G_z2  # type: ignore[return-value]

    def record(self, epoch: int, i: int, batches: int, errD: Any, errG: Any, D_x: Any, D_G_z1: Any, D_G_z2: Any) -> None:
        if i % PRINT_EVERY == 0:
            self.printed.append('[%d/%d][%d/%d]\tLoss_D: %.4f\tLoss_G: %.4f\tD(x): %.4f\tD(G(z)): %.4f / %.4f' % (
                epoch, num_epochs, i, batches, errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
        self.G_losses.append(errG.item())
        self.D_losses.append(errD.item())
        if (self.iters % SNAPSHOT_EVERY == 0) or ((epoch == num_epochs - 1) and (i == batches - 1)):
            with torch.no_grad():
                self.img_list.append(self.netG(self.fixed_noise).detach().cpu())
        self.iters += 1

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizerD, optimizerG = self.optimizers()  # type: ignore[misc]
        self.stats = self.step(batch, optimizerD, optimizerG, self.manual_backward)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.record(self.current_epoch, batch_idx, len(self.trainer.train_dataloader), *self.stats)

    def configure_optimizers(self) -> Any:
        return [optim.Adam(self.netD.parameters(), lr=lr, betas=(beta1, 0.999)),
                optim.Adam(self.netG.parameters(), lr=lr, betas=(beta1, 0.999))]


def celeba_like() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.rand(16, 3, 64, 64, generator=g) * 2 - 1), batch_size=8, shuffle=True)


def original(epochs: int = num_epochs) -> DCGAN:
    random.seed(manualSeed)
    torch.manual_seed(manualSeed)
    model = DCGAN()
    dataloader = celeba_like()
    optimizerD, optimizerG = model.configure_optimizers()
    for epoch in range(epochs):
        for i, data in enumerate(dataloader, 0):
            stats = model.step(data, optimizerD, optimizerG, lambda loss: loss.backward())
            model.record(epoch, i, len(dataloader), *stats)
    return model


def ported(epochs: int = num_epochs) -> tuple[DCGAN, Trainer]:
    random.seed(manualSeed)
    torch.manual_seed(manualSeed)
    model = DCGAN()
    trainer = Trainer(max_epochs=epochs, **QUIET)
    trainer.fit(model, celeba_like())
    return model, trainer


def test_the_port_trains_the_tutorials_gan() -> None:
    (model, trainer), reference = ported(), original()
    assert_same_weights(model, reference)  # batch-norm running statistics included
    assert model.printed == reference.printed and len(model.printed) == 2 * num_epochs
    assert (model.G_losses, model.D_losses) == (reference.G_losses, reference.D_losses)
    assert len(model.img_list) == len(reference.img_list) == 2  # iterations 0 and 3 (also the last)
    assert all(torch.equal(a, b) for a, b in zip(model.img_list, reference.img_list))
    assert trainer.global_step == 2 * 2 * num_epochs  # both optimizers' steps


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported(num_epochs - 1)[0], original())
