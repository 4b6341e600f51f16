"""The UvA deep-learning course's Tutorial 9, "Deep Autoencoders" (course_UvA-DL/08-deep-autoencoders
in Lightning's tutorials), with only its imports changed: the convolutional Encoder/Decoder,
the Autoencoder LightningModule (`save_hyperparameters`, `example_input_array`, Adam with
ReduceLROnPlateau monitoring `val_loss` from a dict), the GenerateCallback that writes
reconstructions with `trainer.logger.experiment.add_image`, `ModelCheckpoint(save_weights_only=True)`,
`LearningRateMonitor("epoch")`, the private `trainer.logger._log_graph`/`_default_hp_metric`
settings, `trainer.test` on the validation and the test loader, and the notebook's
`Autoencoder.load_from_checkpoint(file)` (there for a downloaded model) on the run's checkpoint
with `load_back=True` (Lightning 2.6 refuses its own file there: it holds the Encoder class).

Shrunk or substituted: CIFAR10 is 32/16/16 synthetic 3x32x32 images in [-1, 1] (torchvision is
not installed), `base_channel_size=2`, latent sizes (8, 16) by default (the notebook: 64 to
384), 2 epochs instead of 500, the callback every epoch instead of every 10, batches of 16
and no worker processes; `accelerator="cpu"`; `make_grid` is a small stand-in for torchvision's.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import Callback, LearningRateMonitor, ModelCheckpoint


def make_grid(tensor: Any, nrow: int = 8, padding: int = 2, normalize: bool = False,
              value_range: tuple[float, float] | None = None, pad_value: float = 0.0) -> torch.Tensor:
    """torchvision.utils.make_grid's layout: images in rows of `nrow`, `padding` pixels apart."""
    tensor = torch.stack(list(tensor)) if isinstance(tensor, (list, tuple)) else tensor
    tensor = tensor.float()
    if normalize:
        low, high = value_range if value_range is not None else (float(tensor.min()), float(tensor.max()))
        tensor = tensor.clamp(low, high).sub(low).div(max(high - low, 1e-5))
    n, c, h, w = tensor.shape
    columns = min(nrow, n)
    rows = int(math.ceil(n / columns))
    grid = torch.full((c, rows * (h + padding) + padding, columns * (w + padding) + padding), float(pad_value))
    for k in range(n):
        y, x = divmod(k, columns)
        top, left = y * (h + padding) + padding, x * (w + padding) + padding
        grid[:, top:top + h, left:left + w] = tensor[k]
    return grid


def synthetic_cifar(n: int, seed: int) -> data.TensorDataset:
    """Images in [-1, 1] (ToTensor + Normalize(0.5, 0.5)) with labels, from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 3, 8, 8, generator=g)
    imgs = F.interpolate(base, size=(32, 32), mode="bilinear", align_corners=False) * 2 - 1
    return data.TensorDataset(imgs, torch.randint(0, 10, (n,), generator=g))


class Encoder(nn.Module):
    def __init__(self, num_input_channels: int, base_channel_size: int, latent_dim: int, act_fn: object = nn.GELU):
        super().__init__()
        c_hid = base_channel_size
        self.net = nn.Sequential(
            nn.Conv2d(num_input_channels, c_hid, kernel_size=3, padding=1, stride=2),  # 32x32 => 16x16
            act_fn(),
            nn.Conv2d(c_hid, c_hid, kernel_size=3, padding=1),
            act_fn(),
            nn.Conv2d(c_hid, 2 * c_hid, kernel_size=3, padding=1, stride=2),  # 16x16 => 8x8
            act_fn(),
            nn.Conv2d(2 * c_hid, 2 * c_hid, kernel_size=3, padding=1),
            act_fn(),
            nn.Conv2d(2 * c_hid, 2 * c_hid, kernel_size=3, padding=1, stride=2),  # 8x8 => 4x4
            act_fn(),
            nn.Flatten(),  # Image grid to single feature vector
            nn.Linear(2 * 16 * c_hid, latent_dim),
        )

    def forward(self, x):
        return self.net(x)


class Decoder(nn.Module):
    def __init__(self, num_input_channels: int, base_channel_size: int, latent_dim: int, act_fn: object = nn.GELU):
        super().__init__()
        c_hid = base_channel_size
        self.linear = nn.Sequential(nn.Linear(latent_dim, 2 * 16 * c_hid), act_fn())
        self.net = nn.Sequential(
            nn.ConvTranspose2d(2 * c_hid, 2 * c_hid, kernel_size=3, output_padding=1, padding=1, stride=2),  # 4x4 => 8x8
            act_fn(),
            nn.Conv2d(2 * c_hid, 2 * c_hid, kernel_size=3, padding=1),
            act_fn(),
            nn.ConvTranspose2d(2 * c_hid, c_hid, kernel_size=3, output_padding=1, padding=1, stride=2),  # 8x8 => 16x16
            act_fn(),
            nn.Conv2d(c_hid, c_hid, kernel_size=3, padding=1),
            act_fn(),
            nn.ConvTranspose2d(c_hid, num_input_channels, kernel_size=3, output_padding=1, padding=1, stride=2),  # 16x16 => 32x32
            nn.Tanh(),  # The input images is scaled between -1 and 1, hence the output has to be bounded as well
        )

    def forward(self, x):
        x = self.linear(x)
        x = x.reshape(x.shape[0], -1, 4, 4)
        x = self.net(x)
        return x


class Autoencoder(pl.LightningModule):
    def __init__(
        self,
        base_channel_size: int,
        latent_dim: int,
        encoder_class: object = Encoder,
        decoder_class: object = Decoder,
        num_input_channels: int = 3,
        width: int = 32,
        height: int = 32,
    ):
        super().__init__()
        # Saving hyperparameters of autoencoder
        self.save_hyperparameters()
        # Creating encoder and decoder
        self.encoder = encoder_class(num_input_channels, base_channel_size, latent_dim)
        self.decoder = decoder_class(num_input_channels, base_channel_size, latent_dim)
        # Example input array needed for visualizing the graph of the network
        self.example_input_array = torch.zeros(2, num_input_channels, width, height)

    def forward(self, x):
        """The forward function takes in an image and returns the reconstructed image."""
        z = self.encoder(x)
        x_hat = self.decoder(z)
        return x_hat

    def _get_reconstruction_loss(self, batch):
        """Given a batch of images, this function returns the reconstruction loss (MSE in our case)."""
        x, _ = batch  # We do not need the labels
        x_hat = self.forward(x)
        loss = F.mse_loss(x, x_hat, reduction="none")
        loss = loss.sum(dim=[1, 2, 3]).mean(dim=[0])
        return loss

    def configure_optimizers(self):
        optimizer = optim.Adam(self.parameters(), lr=1e-3)
        # The scheduler reduces the LR if the validation performance hasn't improved for the last N epochs
        scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.2, patience=20, min_lr=5e-5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "val_loss"}

    def training_step(self, batch, batch_idx):
        loss = self._get_reconstruction_loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._get_reconstruction_loss(batch)
        self.log("val_loss", loss)

    def test_step(self, batch, batch_idx):
        loss = self._get_reconstruction_loss(batch)
        self.log("test_loss", loss)


class GenerateCallback(Callback):
    def __init__(self, input_imgs, every_n_epochs=1):
        super().__init__()
        self.input_imgs = input_imgs  # Images to reconstruct during training
        # Only save those images every N epochs (otherwise tensorboard gets quite large)
        self.every_n_epochs = every_n_epochs

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch % self.every_n_epochs == 0:
            # Reconstruct images
            input_imgs = self.input_imgs.to(pl_module.device)
            with torch.no_grad():
                pl_module.eval()
                reconst_imgs = pl_module(input_imgs)
                pl_module.train()
            # Plot and add to tensorboard
            imgs = torch.stack([input_imgs, reconst_imgs], dim=1).flatten(0, 1)
            grid = make_grid(imgs, nrow=2, normalize=True, value_range=(-1, 1))
            trainer.logger.experiment.add_image("Reconstructions", grid, global_step=trainer.global_step)


def main(root_dir: str | Path, precision: str = "32-true", latent_dims: tuple[int, ...] = (8, 16),
         max_epochs: int = 2, load_back: bool = False) -> dict[str, Any]:
    """`load_back`: also rebuild the model from the best checkpoint (the notebook's
    `Autoencoder.load_from_checkpoint`), returned as "best"."""
    CHECKPOINT_PATH = str(root_dir)
    pl.seed_everything(42)
    train_dataset = synthetic_cifar(48, seed=0)
    pl.seed_everything(42)
    train_set, val_set = torch.utils.data.random_split(train_dataset, [32, 16])
    test_set = synthetic_cifar(16, seed=1)
    train_loader = data.DataLoader(train_set, batch_size=16, shuffle=True, drop_last=True, pin_memory=True, num_workers=0)
    val_loader = data.DataLoader(val_set, batch_size=16, shuffle=False, drop_last=False, num_workers=0)
    test_loader = data.DataLoader(test_set, batch_size=16, shuffle=False, drop_last=False, num_workers=0)

    def get_train_images(num):
        return torch.stack([train_dataset[i][0] for i in range(num)], dim=0)

    def train_cifar(latent_dim):
        trainer = pl.Trainer(
            default_root_dir=os.path.join(CHECKPOINT_PATH, f"cifar10_{latent_dim}"),
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            precision=precision,
            callbacks=[
                ModelCheckpoint(save_weights_only=True),
                GenerateCallback(get_train_images(8), every_n_epochs=1),
                LearningRateMonitor("epoch"),
            ],
        )
        trainer.logger._log_graph = True  # If True, we plot the computation graph in tensorboard
        trainer.logger._default_hp_metric = None  # Optional logging argument that we don't need
        model = Autoencoder(base_channel_size=2, latent_dim=latent_dim)
        trainer.fit(model, train_loader, val_loader)
        # Test best model on validation and test set
        val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
        test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
        result = {"test": test_result, "val": val_result}
        # The notebook's path for a saved model, on this run's checkpoint: the classes given as
        # hyperparameters (encoder_class, decoder_class) come back as the defaults they were.
        if load_back:  # Lightning 2.6 refuses its own file here (a class in it: torch.load's weights_only)
            result["loaded"] = Autoencoder.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
        return model, result, trainer

    runs = {}
    for latent_dim in latent_dims:
        model, result, trainer = train_cifar(latent_dim)
        runs[latent_dim] = {"model": model, "result": result, "trainer": trainer}
    last = runs[latent_dims[-1]]
    return {"model": last["model"], "trainer": last["trainer"], "best": last["result"].get("loaded"), "val": last["result"]["val"][0],
            "test": last["result"]["test"][0], "runs": runs}
