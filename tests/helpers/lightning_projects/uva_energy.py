"""The UvA deep-learning course's "Deep Energy-Based Generative Models" notebook
(Lightning-AI/tutorials, course_UvA-DL/07-deep-energy-based-generative-models), with only its
imports changed: the CNN energy function; the `Sampler` whose replay buffer draws from NumPy
(`np.random.binomial`), Python (`random.choices`) and torch, and whose MCMC inside
`training_step` switches the module to eval, turns its parameters' `requires_grad` off and
`torch.set_grad_enabled(True)` back on; `DeepEnergyModel` (save_hyperparameters with a tuple
`img_shape`, `example_input_array`, `[Adam], [StepLR]`, the real batch changed in place, five
values logged per step, validation drawing `torch.rand_like`); the notebook's callbacks, whose
`on_epoch_end` Lightning 2 never calls; and `train_model`: `gradient_clip_val=0.1`,
`ModelCheckpoint(save_weights_only=True, mode="min", monitor="val_contrastive_divergence")`,
`LearningRateMonitor("epoch")`, `load_from_checkpoint(best_model_path)`.

Shrunk or substituted: MNIST is seeded random 1x28x28 images in [-1, 1] (32 train, 16
validation; the loader's label is a zero); batches of 8; the CNN's `hidden_features` 8
instead of 32; 4 MCMC steps per training step instead of 60, and 8 in the callback's
generation; 2 epochs instead of 60; `accelerator="cpu"`, no loader workers; images go
through `torch.utils.tensorboard` directly instead of `torchvision.utils.make_grid`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import Callback, LearningRateMonitor, ModelCheckpoint

device = torch.device("cpu")
MCMC_STEPS = 4


class CNNModel(nn.Module):
    def __init__(self, hidden_features: int = 32, out_dim: int = 1, **kwargs: Any) -> None:
        super().__init__()
        c_hid1, c_hid2, c_hid3 = hidden_features // 2, hidden_features, hidden_features * 2
        self.cnn_layers = nn.Sequential(
            nn.Conv2d(1, c_hid1, kernel_size=5, stride=2, padding=4), nn.SiLU(),
            nn.Conv2d(c_hid1, c_hid2, kernel_size=3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(c_hid2, c_hid3, kernel_size=3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(c_hid3, c_hid3, kernel_size=3, stride=2, padding=1), nn.SiLU(),
            nn.Flatten(), nn.Linear(c_hid3 * 4, c_hid3), nn.SiLU(), nn.Linear(c_hid3, out_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cnn_layers(x).squeeze(dim=-1)


class Sampler:
    def __init__(self, model: nn.Module, img_shape: tuple[int, ...], sample_size: int, max_len: int = 8192) -> None:
        super().__init__()
        self.model, self.img_shape, self.sample_size, self.max_len = model, img_shape, sample_size, max_len
        self.examples = [(torch.rand((1,) + img_shape) * 2 - 1) for _ in range(self.sample_size)]

    def sample_new_exmps(self, steps: int = 60, step_size: int = 10) -> torch.Tensor:
        n_new = np.random.binomial(self.sample_size, 0.05)
        rand_imgs = torch.rand((n_new,) + self.img_shape) * 2 - 1
        old_imgs = torch.cat(random.choices(self.examples, k=self.sample_size - n_new), dim=0)
        inp_imgs = torch.cat([rand_imgs, old_imgs], dim=0).detach().to(device)
        inp_imgs = Sampler.generate_samples(self.model, inp_imgs, steps=steps, step_size=step_size)
        self.examples = list(inp_imgs.to(torch.device("cpu")).chunk(self.sample_size, dim=0)) + self.examples
        self.examples = self.examples[: self.max_len]
        return inp_imgs

    @staticmethod
    def generate_samples(model: nn.Module, inp_imgs: torch.Tensor, steps: int = 60, step_size: int = 10,
                         return_img_per_step: bool = False) -> torch.Tensor:
        is_training = model.training
        model.eval()
        for p in model.parameters():
            p.requires_grad = False
        inp_imgs.requires_grad = True
        had_gradients_enabled = torch.is_grad_enabled()
        torch.set_grad_enabled(True)
        noise = torch.randn(inp_imgs.shape, device=inp_imgs.device)
        imgs_per_step = []
        for _ in range(steps):
            noise.normal_(0, 0.005)
            inp_imgs.data.add_(noise.data)
            inp_imgs.data.clamp_(min=-1.0, max=1.0)
            out_imgs = -model(inp_imgs)
            out_imgs.sum().backward()
            inp_imgs.grad.data.clamp_(-0.03, 0.03)
            inp_imgs.data.add_(-step_size * inp_imgs.grad.data)
            inp_imgs.grad.detach_()
            inp_imgs.grad.zero_()
            inp_imgs.data.clamp_(min=-1.0, max=1.0)
            if return_img_per_step:
                imgs_per_step.append(inp_imgs.clone().detach())
        for p in model.parameters():
            p.requires_grad = True
        model.train(is_training)
        torch.set_grad_enabled(had_gradients_enabled)
        return torch.stack(imgs_per_step, dim=0) if return_img_per_step else inp_imgs


class DeepEnergyModel(pl.LightningModule):
    def __init__(self, img_shape: tuple[int, ...], batch_size: int, alpha: float = 0.1, lr: float = 1e-4, beta1: float = 0.0,
                 **CNN_args: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.cnn = CNNModel(**CNN_args)
        self.sampler = Sampler(self.cnn, img_shape=img_shape, sample_size=batch_size)
        self.example_input_array = torch.zeros(1, *img_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cnn(x)

    def configure_optimizers(self) -> Any:
        optimizer = optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(self.hparams.beta1, 0.999))
        scheduler = optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.97)
        return [optimizer], [scheduler]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        real_imgs, _ = batch
        small_noise = torch.randn_like(real_imgs) * 0.005
        real_imgs.add_(small_noise).clamp_(min=-1.0, max=1.0)
        fake_imgs = self.sampler.sample_new_exmps(steps=MCMC_STEPS, step_size=10)
        inp_imgs = torch.cat([real_imgs, fake_imgs], dim=0)
        real_out, fake_out = self.cnn(inp_imgs).chunk(2, dim=0)
        reg_loss = self.hparams.alpha * (real_out**2 + fake_out**2).mean()
        cdiv_loss = fake_out.mean() - real_out.mean()
        loss = reg_loss + cdiv_loss
        self.log("loss", loss)
        self.log("loss_regularization", reg_loss)
        self.log("loss_contrastive_divergence", cdiv_loss)
        self.log("metrics_avg_real", real_out.mean())
        self.log("metrics_avg_fake", fake_out.mean())
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        real_imgs, _ = batch
        fake_imgs = torch.rand_like(real_imgs) * 2 - 1
        inp_imgs = torch.cat([real_imgs, fake_imgs], dim=0)
        real_out, fake_out = self.cnn(inp_imgs).chunk(2, dim=0)
        cdiv = fake_out.mean() - real_out.mean()
        self.log("val_contrastive_divergence", cdiv)
        self.log("val_fake_out", fake_out.mean())
        self.log("val_real_out", real_out.mean())


class GenerateCallback(Callback):
    def __init__(self, batch_size: int = 8, vis_steps: int = 8, num_steps: int = 256, every_n_epochs: int = 5) -> None:
        super().__init__()
        self.batch_size, self.vis_steps, self.num_steps, self.every_n_epochs = batch_size, vis_steps, num_steps, every_n_epochs

    def on_epoch_end(self, trainer: Any, pl_module: Any) -> None:  # not a hook in Lightning 2: never called
        if trainer.current_epoch % self.every_n_epochs == 0:
            imgs_per_step = self.generate_imgs(pl_module)
            for i in range(imgs_per_step.shape[1]):
                step_size = self.num_steps // self.vis_steps
                trainer.logger.experiment.add_images(f"generation_{i}", imgs_per_step[step_size - 1 :: step_size, i],
                                                     global_step=trainer.current_epoch)

    def generate_imgs(self, pl_module: Any) -> torch.Tensor:
        pl_module.eval()
        start_imgs = torch.rand((self.batch_size,) + pl_module.hparams["img_shape"]).to(pl_module.device)
        start_imgs = start_imgs * 2 - 1
        imgs_per_step = Sampler.generate_samples(pl_module.cnn, start_imgs, steps=self.num_steps, step_size=10,
                                                 return_img_per_step=True)
        pl_module.train()
        return imgs_per_step


class SamplerCallback(Callback):
    def __init__(self, num_imgs: int = 32, every_n_epochs: int = 5) -> None:
        super().__init__()
        self.num_imgs, self.every_n_epochs = num_imgs, every_n_epochs

    def on_epoch_end(self, trainer: Any, pl_module: Any) -> None:  # not a hook in Lightning 2: never called
        if trainer.current_epoch % self.every_n_epochs == 0:
            exmp_imgs = torch.cat(random.choices(pl_module.sampler.examples, k=self.num_imgs), dim=0)
            trainer.logger.experiment.add_images("sampler", exmp_imgs, global_step=trainer.current_epoch)


class OutlierCallback(Callback):
    def __init__(self, batch_size: int = 1024) -> None:
        super().__init__()
        self.batch_size = batch_size

    def on_epoch_end(self, trainer: Any, pl_module: Any) -> None:  # not a hook in Lightning 2: never called
        with torch.no_grad():
            pl_module.eval()
            rand_imgs = torch.rand((self.batch_size,) + pl_module.hparams["img_shape"]).to(pl_module.device)
            rand_out = pl_module.cnn(rand_imgs * 2 - 1.0).mean()
            pl_module.train()
        trainer.logger.experiment.add_scalar("rand_out", rand_out, global_step=trainer.current_epoch)


def loaders() -> tuple[data.DataLoader, data.DataLoader]:
    g = torch.Generator().manual_seed(0)
    train_set = data.TensorDataset(torch.rand(32, 1, 28, 28, generator=g) * 2 - 1, torch.zeros(32, dtype=torch.long))
    test_set = data.TensorDataset(torch.rand(16, 1, 28, 28, generator=g) * 2 - 1, torch.zeros(16, dtype=torch.long))
    train_loader = data.DataLoader(train_set, batch_size=8, shuffle=True, drop_last=True, num_workers=0, pin_memory=True)
    test_loader = data.DataLoader(test_set, batch_size=8, shuffle=False, drop_last=False, num_workers=0)
    return train_loader, test_loader


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 2) -> dict[str, Any]:
    """The notebook's `train_model`, then its first look at the trained model (a generation
    with `GenerateCallback.generate_imgs` after `seed_everything(43)`, the mean score of
    random images)."""
    pl.seed_everything(42)
    train_loader, test_loader = loaders()
    trainer = pl.Trainer(
        default_root_dir=os.path.join(str(root_dir), "MNIST"),
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        precision=precision,
        gradient_clip_val=0.1,
        callbacks=[
            ModelCheckpoint(save_weights_only=True, mode="min", monitor="val_contrastive_divergence"),
            GenerateCallback(every_n_epochs=1, num_steps=8),
            SamplerCallback(every_n_epochs=1),
            OutlierCallback(),
            LearningRateMonitor("epoch"),
        ],
        enable_progress_bar=False,
    )
    pl.seed_everything(42)
    trained = DeepEnergyModel(img_shape=(1, 28, 28), batch_size=train_loader.batch_size, lr=1e-4, beta1=0.0, hidden_features=8)
    trainer.fit(trained, train_loader, test_loader)
    fit_metrics = dict(trainer.callback_metrics)
    model = DeepEnergyModel.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    model.to(device)
    pl.seed_everything(43)
    generated = GenerateCallback(batch_size=4, vis_steps=8, num_steps=8).generate_imgs(model)
    with torch.no_grad():
        rand_imgs = torch.rand((128,) + model.hparams.img_shape).to(model.device)
        rand_out = model.cnn(rand_imgs * 2 - 1.0).mean()
    return {"model": trained, "trainer": trainer, "best": model, "val": fit_metrics, "generated": generated, "rand_out": rand_out,
            "buffer": torch.cat(trained.sampler.examples)}
