"""pytorch/examples' dcgan at toy size: its two networks, the script's own loop, and a port to a
`Module` with manual optimization (tests/examples/test_dcgan.py).

The script as written: `weights_init` on both networks (generator first), the fixed noise drawn
after both, BCELoss, Adam(lr, betas=(beta1, 0.999)) for each network, a shuffled loader; per
batch the discriminator's update (`netD.zero_grad()`, a backward of the real batch's loss, a
generator forward on fresh noise, a backward of the detached fake's loss, `optimizerD.step()`)
and then the generator's (`netG.zero_grad()`, the fake through the discriminator that just
stepped, without freezing it, `optimizerG.step()`); its five numbers printed every batch; every
`SAMPLE_EVERY` batches (100 in the script) a forward of the fixed noise through the generator
in training mode (to save an image: it updates the generator's BatchNorm running statistics,
and the weights compared include them); both state dicts saved after each epoch. The script
never calls `eval()`. --dry-run is one epoch of one batch. Sizes are shrunk (nz=8, ngf=ndf=4,
64x64 images, as the architecture needs), the data is FakeData-shaped (3 channels, in [0, 1]);
the loader reads in the main process unless `workers` (the script's --workers, 2 by default).

Amp/bf16 versions of the original follow PyTorch's recipe for several optimizers: autocast
around each forward and loss, one GradScaler, `scaler.update()` after the discriminator's step
(before the generator's backward, as GradScaler needs) and after the generator's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module

NZ, NGF, NDF, NC, IMAGE, BATCH, SAMPLE_EVERY = 8, 4, 4, 3, 64, 4, 2
REAL_LABEL, FAKE_LABEL = 1, 0


def weights_init(m: nn.Module) -> None:
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 8), nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 8, NGF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 4), nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 2), nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),
            nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, NDF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 4, NDF * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 8), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.main(input).view(-1, 1).squeeze(1)


class DCGAN(Module):
    """Both networks, built in the script's order; the training step is the script's batch."""

    def __init__(self, outf: Path | None = None, sample: bool = True, toggle: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.netG = Generator()
        self.netG.apply(weights_init)
        self.netD = Discriminator()
        self.netD.apply(weights_init)
        self.criterion = nn.BCELoss()
        self.register_buffer("fixed_noise", torch.randn(BATCH, NZ, 1, 1), persistent=False)
        self.outf, self.sample, self.toggle = outf, sample, toggle
        self.printed: list[tuple[float, ...]] = []

    def configure_optimizers(self) -> Any:
        optimizerD = torch.optim.Adam(self.netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
        optimizerG = torch.optim.Adam(self.netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
        return [optimizerD, optimizerG]

    def training_step(self, data: Any, i: int) -> None:
        optimizerD, optimizerG = self.optimizers()
        self.netD.zero_grad()
        real_cpu = data[0]
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), REAL_LABEL, dtype=real_cpu.dtype, device=real_cpu.device)
        output = self.netD(real_cpu)
        errD_real = self.criterion(output, label)
        self.manual_backward(errD_real)
        D_x = output.mean().item()
        noise = torch.randn(batch_size, NZ, 1, 1, device=real_cpu.device)
        fake = self.netG(noise)
        label.fill_(FAKE_LABEL)
        output = self.netD(fake.detach())
        errD_fake = self.criterion(output, label)
        self.manual_backward(errD_fake)
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        self.netG.zero_grad()
        if self.toggle:  # the porting guide's GAN: the discriminator frozen for the generator's loss
            self.toggle_optimizer(optimizerG)
        label.fill_(REAL_LABEL)
        output = self.netD(fake)
        errG = self.criterion(output, label)
        self.manual_backward(errG)
        D_G_z2 = output.mean().item()
        optimizerG.step()
        if self.toggle:
            self.untoggle_optimizer(optimizerG)
        self.printed.append((errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
        if self.sample and i % SAMPLE_EVERY == 0:
            self.netG(self.fixed_noise)  # the script saves this image

    def on_train_epoch_end(self) -> None:
        if self.outf is not None:
            save_epoch(self, self.current_epoch)


def save_epoch(model: DCGAN, epoch: int) -> None:
    assert model.outf is not None
    torch.save(model.netG.state_dict(), model.outf / f"netG_epoch_{epoch}.pth")
    torch.save(model.netD.state_dict(), model.outf / f"netD_epoch_{epoch}.pth")


def make_dcgan(outf: Path | None = None, workers: int = 0, **kwargs: Any) -> tuple[DCGAN, DataLoader]:
    torch.manual_seed(7)  # --manualSeed
    images = torch.rand(4 * BATCH, NC, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))
    dataloader = DataLoader(TensorDataset(images, torch.zeros(4 * BATCH, dtype=torch.long)), batch_size=BATCH,
                            shuffle=True, num_workers=workers)
    return DCGAN(outf, **kwargs), dataloader


def original_dcgan(precision: str, dry_run: bool = False, outf: Path | None = None, niter: int = 2,
                   workers: int = 0) -> DCGAN:
    model, dataloader = make_dcgan(outf, workers)
    netG, netD, criterion = model.netG, model.netD, model.criterion
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optimizerD, optimizerG = model.configure_optimizers()
    if dry_run:
        niter = 1
    for epoch in range(niter):
        for i, data in enumerate(dataloader, 0):
            netD.zero_grad()
            real_cpu = data[0]
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), REAL_LABEL, dtype=real_cpu.dtype)
            with autocast():
                output = netD(real_cpu)
                errD_real = criterion(output, label)
            scaler.scale(errD_real).backward()
            D_x = output.mean().item()
            noise = torch.randn(batch_size, NZ, 1, 1)
            with autocast():
                fake = netG(noise)
            label.fill_(FAKE_LABEL)
            with autocast():
                output = netD(fake.detach())
                errD_fake = criterion(output, label)
            scaler.scale(errD_fake).backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            scaler.step(optimizerD)
            scaler.update()

            netG.zero_grad()
            label.fill_(REAL_LABEL)
            with autocast():
                output = netD(fake)
                errG = criterion(output, label)
            scaler.scale(errG).backward()
            D_G_z2 = output.mean().item()
            scaler.step(optimizerG)
            scaler.update()
            model.printed.append((errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
            if i % SAMPLE_EVERY == 0:
                with autocast():
                    netG(model.fixed_noise)
            if dry_run:
                break
        if outf is not None:
            save_epoch(model, epoch)
    return model
