"""Lightning's GAN domain template (examples/pytorch/domain_templates/generative_adversarial_net.py),
small: imported the way the script imports (`cli_lightning_logo`, `LightningModule` from the
`core` package, `Trainer` from the `trainer` module, `_TORCHVISION_AVAILABLE`), trained on the
shipped demo's `MNISTDataModule` (`trainer.demos.mnist_datamodule`; the twin imports Lightning's):
an MLP generator with `BatchNorm1d(out, 0.8)` blocks and a discriminator on logits, manual
optimization with two Adam optimizers returned as a tuple, `toggle_optimizer`, `log_dict`,
`example_input_array`, and samples of the fixed `validation_z` written to every logger in
`on_train_epoch_end`.

The MNIST download is replaced by a small folder in the hosted copy's format written first
(`MNIST/complete/training.pt` and `test.pt`: synthetic uint8 images), which both demos read
(Lightning's with `PL_USE_MOCKED_MNIST=1`, set here, as it has no torchvision to use); without
torchvision the samples are logged as one image instead of torchvision's grid. 48 training
images (16 for validation), batches of 16, `num_workers=0` (the demo's default is 16), two
epochs, a latent size of 32 (the script's: 100).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer import cli_lightning_logo
from trainer.core import LightningModule
from trainer.demos.mnist_datamodule import MNISTDataModule
from trainer.trainer import Trainer
from trainer.utilities.imports import _TORCHVISION_AVAILABLE

if _TORCHVISION_AVAILABLE:
    import torchvision


class Generator(nn.Module):
    def __init__(self, latent_dim: int = 100, img_shape: tuple = (1, 28, 28)) -> None:
        super().__init__()
        self.img_shape = img_shape

        def block(in_feat: int, out_feat: int, normalize: bool = True) -> list[nn.Module]:
            layers: list[nn.Module] = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(latent_dim, 128, normalize=False),
            *block(128, 256),
            *block(256, 512),
            *block(512, 1024),
            nn.Linear(1024, int(math.prod(img_shape))),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape: tuple) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(int(math.prod(img_shape)), 512),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(512, 256),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(256, 1),
        )

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.model(img.view(img.size(0), -1))


class GAN(LightningModule):
    def __init__(self, img_shape: tuple = (1, 28, 28), lr: float = 0.0002, b1: float = 0.5, b2: float = 0.999,
                 latent_dim: int = 100) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim=self.hparams.latent_dim, img_shape=img_shape)
        self.discriminator = Discriminator(img_shape=img_shape)
        self.validation_z = torch.randn(8, self.hparams.latent_dim)
        self.example_input_array = torch.zeros(2, self.hparams.latent_dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    @staticmethod
    def adversarial_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(y_hat, y)

    def training_step(self, batch: Any) -> None:
        imgs, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)
        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        self.toggle_optimizer(opt_g)
        g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        self.toggle_optimizer(opt_d)
        real_loss = self.adversarial_loss(self.discriminator(imgs), valid)
        fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
        fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
        d_loss = (real_loss + fake_loss) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def configure_optimizers(self) -> Any:
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return opt_g, opt_d

    def on_train_epoch_end(self) -> None:
        z = self.validation_z.type_as(self.generator.model[0].weight)
        sample_imgs = self(z)
        grid = torchvision.utils.make_grid(sample_imgs) if _TORCHVISION_AVAILABLE else sample_imgs[0]
        for logger in self.loggers:
            logger.experiment.add_image("generated_images", grid, self.current_epoch)


def write_mnist(root: Path, train: int = 48, test: int = 16) -> None:
    folder = root / "MNIST" / "complete"
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(8)
    for name, count in (("training.pt", train), ("test.pt", test)):
        images = torch.randint(0, 256, (count, 28, 28), generator=generator, dtype=torch.uint8)
        torch.save((images, torch.randint(10, (count,), generator=generator)), folder / name)


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    root = Path(root_dir)
    cli_lightning_logo()
    write_mnist(root / "data")
    os.environ["PL_USE_MOCKED_MNIST"] = "1"
    torch.manual_seed(3)
    model = GAN(lr=0.0002, b1=0.5, b2=0.999, latent_dim=32)
    dm = MNISTDataModule(data_dir=str(root / "data"), val_split=16, num_workers=0, batch_size=16)
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=2, precision=precision, default_root_dir=root,
                      enable_progress_bar=False, log_every_n_steps=1)
    trainer.fit(model, dm)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
