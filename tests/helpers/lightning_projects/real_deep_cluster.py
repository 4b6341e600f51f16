"""An unsupervised segmentation head trained with the IIC loss, from SIT-FUSE
(`sit_fuse/models/deep_cluster/cdbn_dc.py`, class `CDBN_DC(pl.LightningModule)`).

Kept as written: the two views made by adding numpy noise (`self.rng.normal`) to every encoder
feature map, the upsample/fusion/interpolate/softmax path, the IIC loss summed over chunks of
100 pixels, `self.log('train_loss', loss, sync_dist=True)` in `training_step` *and*
`validation_step` (one name logged by both stages), `predict_step(self, batch, batch_idx,
dataloader_idx)` (no default: it needs several predict loaders) returning `self(batch)` (whose
`forward` runs the segmentor and returns the softmax of the resized input, as written), and
`OneCycleLR(total_steps=self.trainer.estimated_stepping_batches)` stepped per step.
Substituted: the pretrained deep belief network encoder is two small conv layers
(`CDBNSegmentor` is rebuilt here with `encoder`, `upsamples`, `fusion`, `seg_head`), `IID_loss`
is the IIC paper's loss written here, the debugging `print`s are left out, and the numpy
generator is seeded (`default_rng(None)` draws from the OS); synthetic images; sizes shrunk.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainer as pl


def compute_joint(x_out: torch.Tensor, x_tf_out: torch.Tensor) -> torch.Tensor:
    p_i_j = (x_out.unsqueeze(2) * x_tf_out.unsqueeze(1)).sum(dim=0)
    p_i_j = (p_i_j + p_i_j.t()) / 2.0
    return p_i_j / p_i_j.sum()


def IID_loss(x_out: torch.Tensor, x_tf_out: torch.Tensor, lamb: float = 1.0, EPS: float = sys.float_info.epsilon):
    _, k = x_out.size()
    p_i_j = compute_joint(x_out, x_tf_out)
    p_i = p_i_j.sum(dim=1).view(k, 1).expand(k, k)
    p_j = p_i_j.sum(dim=0).view(1, k).expand(k, k)
    p_i_j = p_i_j.clamp(min=EPS)
    p_j, p_i = p_j.clamp(min=EPS), p_i.clamp(min=EPS)
    loss = (-p_i_j * (torch.log(p_i_j) - lamb * torch.log(p_j) - lamb * torch.log(p_i))).sum()
    loss_no_lamb = (-p_i_j * (torch.log(p_i_j) - torch.log(p_j) - torch.log(p_i))).sum()
    return loss, loss_no_lamb


class Encoder(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(channels, 6, 3, padding=1)
        self.c2 = nn.Conv2d(6, 8, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        a = torch.relu(self.c1(x))
        return [a, torch.relu(self.c2(a))]


class CDBNSegmentor(nn.Module):
    def __init__(self, num_classes: int, channels: int) -> None:
        super().__init__()
        self.encoder = Encoder(channels)
        self.upsamples = nn.ModuleList([nn.Identity(), nn.Upsample(size=(12, 12), mode="bilinear", align_corners=False)])
        self.fusion = nn.Conv2d(14, 8, 1)
        self.seg_head = nn.Conv2d(8, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [up(f) for up, f in zip(self.upsamples, self.encoder(x))]
        return self.seg_head(self.fusion(torch.cat(y, dim=1)))


class CDBN_DC(pl.LightningModule):
    def __init__(self, num_classes: int = 5, channels: int = 3, lr: float = 1e-2, weight_decay: float = 0, seed: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.num_classes = num_classes
        self.lr = lr
        self.weight_decay = weight_decay
        self.segmentor = CDBNSegmentor(num_classes, channels)
        self.mlp_head = self.segmentor.seg_head
        self.criterion = IID_loss
        self.rng = np.random.default_rng(seed)
        self.lrs: list[float] = []

    def forward(self, x):
        self.segmentor(x)
        x = F.interpolate(x, size=(15, 15), mode="bilinear", align_corners=False)
        x = F.softmax(x, dim=1)
        return x

    def _two_views_loss(self, batch):
        y = batch
        y = self.segmentor.encoder(y)
        y2 = []
        for i in range(len(y)):
            y2.append(y[i].clone())
            y2[i] = y2[i] + torch.from_numpy(self.rng.normal(0.0, 0.01, (y[i].shape))).type(y[i].dtype).to(y[i].device)
            y[i] = self.segmentor.upsamples[i](y[i])
            y2[i] = self.segmentor.upsamples[i](y2[i])
        y = torch.cat(y, dim=1)
        y2 = torch.cat(y2, dim=1)
        y = self.segmentor.fusion(y)
        y2 = self.segmentor.fusion(y2)
        y = F.interpolate(y, size=(15, 15), mode="bilinear", align_corners=False)
        y2 = F.interpolate(y2, size=(15, 15), mode="bilinear", align_corners=False)
        y = F.softmax(self.segmentor.seg_head(y), dim=1)
        y2 = F.softmax(self.segmentor.seg_head(y2), dim=1)
        y = torch.flatten(y.permute(0, 2, 3, 1), start_dim=0, end_dim=2)
        y2 = torch.flatten(y2.permute(0, 2, 3, 1), start_dim=0, end_dim=2)
        loss = 0
        for i in range(0, y.shape[0], 100):
            i2 = i + 100
            if i2 > y.shape[0]:
                i2 = y.shape[0]
            loss = loss + self.criterion(y[i:i2], y2[i:i2], lamb=1.0)[0]
        loss = loss / int(math.ceil(y.shape[0] / 100))
        return loss

    def training_step(self, batch, batch_idx):
        loss = self._two_views_loss(batch)
        self.log('train_loss', loss, sync_dist=True)
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._two_views_loss(batch)
        self.log('train_loss', loss, sync_dist=True)
        return loss

    def predict_step(self, batch, batch_idx, dataloader_idx):
        return self(batch)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.lr,
                                                        total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3, accumulate_grad_batches: int = 2,
         predict_loaders: int = 2) -> dict[str, Any]:
    pl.seed_everything(9)
    g = torch.Generator().manual_seed(12)
    images = torch.rand(40, 3, 12, 12, generator=g)
    model = CDBN_DC()
    trainer = pl.Trainer(max_epochs=max_epochs, precision=precision, accelerator="cpu", default_root_dir=root_dir,
                         accumulate_grad_batches=accumulate_grad_batches, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(images[:32], batch_size=4, shuffle=True), DataLoader(images[32:], batch_size=4))
    fit_metrics = dict(trainer.callback_metrics)
    loaders = [DataLoader(images[32 + 4 * i:36 + 4 * i], batch_size=2) for i in range(predict_loaders)]
    predictions = trainer.predict(model, loaders if predict_loaders > 1 else loaders[0])
    return {"model": model, "trainer": trainer, "val": fit_metrics, "predictions": predictions, "lrs": model.lrs}
