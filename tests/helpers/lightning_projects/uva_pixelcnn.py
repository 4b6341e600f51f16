"""The UvA deep-learning course's Tutorial 12, "Autoregressive Image Modeling" (PixelCNN;
course_UvA-DL/10-autoregressive-image-modeling in Lightning's tutorials), with only its imports
changed: masked convolutions that mask their weights in place in every forward
(`self.conv.weight.data *= self.mask`), gated blocks with dilation, the PixelCNN
LightningModule (`save_hyperparameters`, an integer `example_input_array`, Adam with StepLR),
the notebook's `train_model` (ModelCheckpoint on `val_bpd` with `save_weights_only=True`,
`LearningRateMonitor("epoch")`), `trainer.test` on the validation and test loaders, and
`pl.seed_everything(1)` before sampling from the trained model.

Shrunk or substituted: MNIST is 64/32/32 synthetic 1x8x8 images of integers 0..255 (torchvision
is not installed); 3 gated blocks of 8 channels instead of 7 of 64; 2 epochs instead of 150;
batches of 32, no worker processes; 2 samples of 1x4x4; `accelerator="cpu"`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import LearningRateMonitor, ModelCheckpoint

device = torch.device("cpu")
train_set: Any = None  # the notebook's global, set by `main` (PixelCNN's example input comes from it)


def synthetic_mnist(n: int, seed: int) -> data.TensorDataset:
    """Discretized images (ToTensor, then `(sample * 255).to(torch.long)`) with labels."""
    g = torch.Generator().manual_seed(seed)
    imgs = (F.interpolate(torch.rand(n, 1, 4, 4, generator=g), size=(8, 8), mode="bilinear", align_corners=False) * 255).to(torch.long)
    return data.TensorDataset(imgs, torch.randint(0, 10, (n,), generator=g))


class MaskedConvolution(nn.Module):
    def __init__(self, c_in, c_out, mask, **kwargs):
        """Implements a convolution with mask applied on its weights.
        Args:
            c_in: Number of input channels
            c_out: Number of output channels
            mask: Tensor of shape [kernel_size_H, kernel_size_W] with 0s where
                   the convolution should be masked, and 1s otherwise.
            kwargs: Additional arguments for the convolution
        """
        super().__init__()
        # For simplicity: calculate padding automatically
        kernel_size = (mask.shape[0], mask.shape[1])
        dilation = 1 if "dilation" not in kwargs else kwargs["dilation"]
        padding = tuple(dilation * (kernel_size[i] - 1) // 2 for i in range(2))
        # Actual convolution
        self.conv = nn.Conv2d(c_in, c_out, kernel_size, padding=padding, **kwargs)
        # Mask as buffer => it is no parameter but still a tensor of the module
        # (must be moved with the devices)
        self.register_buffer("mask", mask[None, None])
    def forward(self, x):
        self.conv.weight.data *= self.mask  # Ensures zero's at masked positions
        return self.conv(x)


class VerticalStackConvolution(MaskedConvolution):
    def __init__(self, c_in, c_out, kernel_size=3, mask_center=False, **kwargs):
        # Mask out all pixels below. For efficiency, we could also reduce the kernel
        # size in height, but for simplicity, we stick with masking here.
        mask = torch.ones(kernel_size, kernel_size)
        mask[kernel_size // 2 + 1 :, :] = 0
        # For the very first convolution, we will also mask the center row
        if mask_center:
            mask[kernel_size // 2, :] = 0
        super().__init__(c_in, c_out, mask, **kwargs)


class HorizontalStackConvolution(MaskedConvolution):
    def __init__(self, c_in, c_out, kernel_size=3, mask_center=False, **kwargs):
        # Mask out all pixels on the left. Note that our kernel has a size of 1
        # in height because we only look at the pixel in the same row.
        mask = torch.ones(1, kernel_size)
        mask[0, kernel_size // 2 + 1 :] = 0
        # For the very first convolution, we will also mask the center pixel
        if mask_center:
            mask[0, kernel_size // 2] = 0
        super().__init__(c_in, c_out, mask, **kwargs)


class GatedMaskedConv(nn.Module):
    def __init__(self, c_in, **kwargs):
        """Gated Convolution block implemented the computation graph shown above."""
        super().__init__()
        self.conv_vert = VerticalStackConvolution(c_in, c_out=2 * c_in, **kwargs)
        self.conv_horiz = HorizontalStackConvolution(c_in, c_out=2 * c_in, **kwargs)
        self.conv_vert_to_horiz = nn.Conv2d(2 * c_in, 2 * c_in, kernel_size=1, padding=0)
        self.conv_horiz_1x1 = nn.Conv2d(c_in, c_in, kernel_size=1, padding=0)
    def forward(self, v_stack, h_stack):
        # Vertical stack (left)
        v_stack_feat = self.conv_vert(v_stack)
        v_val, v_gate = v_stack_feat.chunk(2, dim=1)
        v_stack_out = torch.tanh(v_val) * torch.sigmoid(v_gate)
        # Horizontal stack (right)
        h_stack_feat = self.conv_horiz(h_stack)
        h_stack_feat = h_stack_feat + self.conv_vert_to_horiz(v_stack_feat)
        h_val, h_gate = h_stack_feat.chunk(2, dim=1)
        h_stack_feat = torch.tanh(h_val) * torch.sigmoid(h_gate)
        h_stack_out = self.conv_horiz_1x1(h_stack_feat)
        h_stack_out = h_stack_out + h_stack
        return v_stack_out, h_stack_out


class PixelCNN(pl.LightningModule):
    def __init__(self, c_in, c_hidden):
        super().__init__()
        self.save_hyperparameters()
        # Initial convolutions skipping the center pixel
        self.conv_vstack = VerticalStackConvolution(c_in, c_hidden, mask_center=True)
        self.conv_hstack = HorizontalStackConvolution(c_in, c_hidden, mask_center=True)
        # Convolution block of PixelCNN. We use dilation instead of downscaling
        self.conv_layers = nn.ModuleList(
            [
                GatedMaskedConv(c_hidden),
                GatedMaskedConv(c_hidden, dilation=2),
                GatedMaskedConv(c_hidden),
            ]
        )
        # Output classification convolution (1x1)
        self.conv_out = nn.Conv2d(c_hidden, c_in * 256, kernel_size=1, padding=0)
        self.example_input_array = train_set[0][0][None]
    def forward(self, x):
        """Forward image through model and return logits for each pixel.
        Args:
            x: Image tensor with integer values between 0 and 255.
        """
        # Scale input from 0 to 255 back to -1 to 1
        x = (x.float() / 255.0) * 2 - 1
        # Initial convolutions
        v_stack = self.conv_vstack(x)
        h_stack = self.conv_hstack(x)
        # Gated Convolutions
        for layer in self.conv_layers:
            v_stack, h_stack = layer(v_stack, h_stack)
        # 1x1 classification convolution
        # Apply ELU before 1x1 convolution for non-linearity on residual connection
        out = self.conv_out(F.elu(h_stack))
        # Output dimensions: [Batch, Classes, Channels, Height, Width]
        out = out.reshape(out.shape[0], 256, out.shape[1] // 256, out.shape[2], out.shape[3])
        return out
    def calc_likelihood(self, x):
        # Forward pass with bpd likelihood calculation
        pred = self.forward(x)
        nll = F.cross_entropy(pred, x, reduction="none")
        bpd = nll.mean(dim=[1, 2, 3]) * np.log2(np.exp(1))
        return bpd.mean()
    @torch.no_grad()
    def sample(self, img_shape, img=None):
        """Sampling function for the autoregressive model.
        Args:
            img_shape: Shape of the image to generate (B,C,H,W)
            img (optional): If given, this tensor will be used as
                             a starting image. The pixels to fill
                             should be -1 in the input tensor.
        """
        # Create empty image
        if img is None:
            img = torch.zeros(img_shape, dtype=torch.long).to(device) - 1
        # Generation loop
        for h in range(img_shape[2]):
            for w in range(img_shape[3]):
                for c in range(img_shape[1]):
                    # Skip if not to be filled (-1)
                    if (img[:, c, h, w] != -1).all().item():
                        continue
                    # For efficiency, we only have to input the upper part of the image
                    # as all other parts will be skipped by the masked convolutions anyways
                    pred = self.forward(img[:, :, : h + 1, :])
                    probs = F.softmax(pred[:, :, c, h, w], dim=-1)
                    img[:, c, h, w] = torch.multinomial(probs, num_samples=1).squeeze(dim=-1)
        return img
    def configure_optimizers(self):
        optimizer = optim.Adam(self.parameters(), lr=1e-3)
        scheduler = optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.99)
        return [optimizer], [scheduler]
    def training_step(self, batch, batch_idx):
        loss = self.calc_likelihood(batch[0])
        self.log("train_bpd", loss)
        return loss
    def validation_step(self, batch, batch_idx):
        loss = self.calc_likelihood(batch[0])
        self.log("val_bpd", loss)
    def test_step(self, batch, batch_idx):
        loss = self.calc_likelihood(batch[0])
        self.log("test_bpd", loss)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 2) -> dict[str, Any]:
    global train_set
    CHECKPOINT_PATH = str(root_dir)
    pl.seed_everything(42)
    train_dataset = synthetic_mnist(96, seed=0)
    pl.seed_everything(42)
    train_set, val_set = torch.utils.data.random_split(train_dataset, [64, 32])
    test_set = synthetic_mnist(32, seed=1)
    train_loader = data.DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True, pin_memory=True, num_workers=0)
    val_loader = data.DataLoader(val_set, batch_size=32, shuffle=False, drop_last=False, num_workers=0)
    test_loader = data.DataLoader(test_set, batch_size=32, shuffle=False, drop_last=False, num_workers=0)

    def train_model(**kwargs):
        trainer = pl.Trainer(
            default_root_dir=os.path.join(CHECKPOINT_PATH, "PixelCNN"),
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            precision=precision,
            callbacks=[
                ModelCheckpoint(save_weights_only=True, mode="min", monitor="val_bpd"),
                LearningRateMonitor("epoch"),
            ],
        )
        model = PixelCNN(**kwargs)
        trainer.fit(model, train_loader, val_loader)
        model = model.to(device)
        val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
        test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
        result = {"test": test_result, "val": val_result}
        return model, result, trainer

    model, result, trainer = train_model(c_in=1, c_hidden=8)
    pl.seed_everything(1)
    samples = model.sample(img_shape=(2, 1, 4, 4))
    return {"model": model, "trainer": trainer, "val": result["val"][0], "test": result["test"][0], "samples": samples}
