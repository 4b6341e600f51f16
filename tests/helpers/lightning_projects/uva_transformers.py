"""The UvA deep-learning course's "Transformers and Multi-Head Attention" notebook
(Lightning-AI/tutorials, course_UvA-DL/05-transformers-and-MH-attention/MHAttention.py), with
only its imports changed: the hand-written multi-head attention, encoder and positional
encoding; `TransformerPredictor`, whose `configure_optimizers` keeps a `CosineWarmupScheduler`
(an `_LRScheduler` subclass) on the module instead of returning it and steps it in an
`optimizer_step` override after `super().optimizer_step(*args, **kwargs)`; and its two tasks,
each with the notebook's `Trainer(callbacks=[ModelCheckpoint(save_weights_only=True, mode="max",
monitor="val_acc")], gradient_clip_val=...)`, `trainer.logger._default_hp_metric = None`,
`max_iters=trainer.max_epochs * len(train_loader)` and `trainer.test` on several loaders:
`ReversePredictor` (sequences reversed; the trained module is tested) and `AnomalyPredictor`
(find the odd one in a set; the training set is sampled again for each item from NumPy's
global stream, the evaluation sets once after `np.random.seed(42)`; the best checkpoint is
loaded with `load_from_checkpoint` and tested).

Shrunk or substituted: the CIFAR100 features of a pretrained ResNet34 are seeded random
16-dim features of 8 classes; sequences of length 6; smaller datasets, models
(`model_dim` 16, one layer), warm-ups (5 steps) and 2 epochs; `accelerator="cpu"`, no loader
workers; the pretrained-file download is left out.
"""

from __future__ import annotations

import math
import os
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import ModelCheckpoint


def scaled_dot_product(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    d_k = q.size()[-1]
    attn_logits = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        attn_logits = attn_logits.masked_fill(mask == 0, -9e15)
    attention = F.softmax(attn_logits, dim=-1)
    return torch.matmul(attention, v), attention


class MultiheadAttention(nn.Module):
    def __init__(self, input_dim: int, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        assert embed_dim % num_heads == 0, "Embedding dimension must be 0 modulo number of heads."
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.qkv_proj = nn.Linear(input_dim, 3 * embed_dim)
        self.o_proj = nn.Linear(embed_dim, embed_dim)
        nn.init.xavier_uniform_(self.qkv_proj.weight)
        self.qkv_proj.bias.data.fill_(0)
        nn.init.xavier_uniform_(self.o_proj.weight)
        self.o_proj.bias.data.fill_(0)

    def forward(self, x: torch.Tensor, mask: Any = None, return_attention: bool = False) -> Any:
        batch_size, seq_length, embed_dim = x.size()
        qkv = self.qkv_proj(x).reshape(batch_size, seq_length, self.num_heads, 3 * self.head_dim).permute(0, 2, 1, 3)
        q, k, v = qkv.chunk(3, dim=-1)
        values, attention = scaled_dot_product(q, k, v, mask=mask)
        o = self.o_proj(values.permute(0, 2, 1, 3).reshape(batch_size, seq_length, embed_dim))
        return (o, attention) if return_attention else o


class EncoderBlock(nn.Module):
    def __init__(self, input_dim: int, num_heads: int, dim_feedforward: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(input_dim, input_dim, num_heads)
        self.linear_net = nn.Sequential(nn.Linear(input_dim, dim_feedforward), nn.Dropout(dropout), nn.ReLU(inplace=True),
                                        nn.Linear(dim_feedforward, input_dim))
        self.norm1, self.norm2 = nn.LayerNorm(input_dim), nn.LayerNorm(input_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: Any = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.self_attn(x, mask=mask)))
        return self.norm2(x + self.dropout(self.linear_net(x)))


class TransformerEncoder(nn.Module):
    def __init__(self, num_layers: int, **block_args: Any) -> None:
        super().__init__()
        self.layers = nn.ModuleList([EncoderBlock(**block_args) for _ in range(num_layers)])

    def forward(self, x: torch.Tensor, mask: Any = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask=mask)
        return x


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[:, : x.size(1)]


class CosineWarmupScheduler(optim.lr_scheduler._LRScheduler):
    def __init__(self, optimizer: optim.Optimizer, warmup: int, max_iters: int) -> None:
        self.warmup = warmup
        self.max_num_iters = max_iters
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        lr_factor = self.get_lr_factor(epoch=self.last_epoch)
        return [base_lr * lr_factor for base_lr in self.base_lrs]

    def get_lr_factor(self, epoch: int) -> float:
        lr_factor = 0.5 * (1 + np.cos(np.pi * epoch / self.max_num_iters))
        if epoch <= self.warmup:
            lr_factor *= epoch * 1.0 / self.warmup
        return lr_factor


class TransformerPredictor(pl.LightningModule):
    def __init__(self, input_dim: int, model_dim: int, num_classes: int, num_heads: int, num_layers: int, lr: float,
                 warmup: int, max_iters: int, dropout: float = 0.0, input_dropout: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self._create_model()

    def _create_model(self) -> None:
        self.input_net = nn.Sequential(nn.Dropout(self.hparams.input_dropout), nn.Linear(self.hparams.input_dim, self.hparams.model_dim))
        self.positional_encoding = PositionalEncoding(d_model=self.hparams.model_dim)
        self.transformer = TransformerEncoder(num_layers=self.hparams.num_layers, input_dim=self.hparams.model_dim,
                                              dim_feedforward=2 * self.hparams.model_dim, num_heads=self.hparams.num_heads,
                                              dropout=self.hparams.dropout)
        self.output_net = nn.Sequential(
            nn.Linear(self.hparams.model_dim, self.hparams.model_dim), nn.LayerNorm(self.hparams.model_dim), nn.ReLU(inplace=True),
            nn.Dropout(self.hparams.dropout), nn.Linear(self.hparams.model_dim, self.hparams.num_classes),
        )

    def forward(self, x: torch.Tensor, mask: Any = None, add_positional_encoding: bool = True) -> torch.Tensor:
        x = self.input_net(x)
        if add_positional_encoding:
            x = self.positional_encoding(x)
        return self.output_net(self.transformer(x, mask=mask))

    def configure_optimizers(self) -> Any:
        optimizer = optim.Adam(self.parameters(), lr=self.hparams.lr)
        # We don't return the lr scheduler because we need to apply it per iteration, not per epoch
        self.lr_scheduler = CosineWarmupScheduler(optimizer, warmup=self.hparams.warmup, max_iters=self.hparams.max_iters)
        return optimizer

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        self.lr_scheduler.step()  # Step per iteration

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        raise NotImplementedError

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        raise NotImplementedError

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        raise NotImplementedError


# ------------------------------------------------------------------------- the reverse task
class ReverseDataset(data.Dataset):
    def __init__(self, num_categories: int, seq_len: int, size: int) -> None:
        super().__init__()
        self.num_categories, self.seq_len, self.size = num_categories, seq_len, size
        self.data = torch.randint(self.num_categories, size=(self.size, self.seq_len))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        inp_data = self.data[idx]
        return inp_data, torch.flip(inp_data, dims=(0,))


class ReversePredictor(TransformerPredictor):
    def _calculate_loss(self, batch: Any, mode: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        inp_data, labels = batch
        inp_data = F.one_hot(inp_data, num_classes=self.hparams.num_classes).float()
        preds = self.forward(inp_data, add_positional_encoding=True)
        loss = F.cross_entropy(preds.view(-1, preds.size(-1)), labels.view(-1))
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log(f"{mode}_loss", loss)
        self.log(f"{mode}_acc", acc)
        return loss, acc

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, _ = self._calculate_loss(batch, mode="train")
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        _ = self._calculate_loss(batch, mode="val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        _ = self._calculate_loss(batch, mode="test")


def train_reverse(root_dir: str, train_loader: data.DataLoader, val_loader: data.DataLoader, test_loader: data.DataLoader,
                  max_epochs: int, **kwargs: Any) -> tuple[Any, Any, dict[str, Any]]:
    root_dir = os.path.join(root_dir, "ReverseTask")
    os.makedirs(root_dir, exist_ok=True)
    trainer = pl.Trainer(
        default_root_dir=root_dir,
        callbacks=[ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc")],
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        gradient_clip_val=5,
        enable_progress_bar=False,
    )
    trainer.logger._default_hp_metric = None
    model = ReversePredictor(max_iters=trainer.max_epochs * len(train_loader), **kwargs)
    trainer.fit(model, train_loader, val_loader)
    val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
    test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
    return model, trainer, {"test_acc": test_result[0]["test_acc"], "val_acc": val_result[0]["test_acc"], "val": val_result[0]}


# ------------------------------------------------------------------------- the anomaly task
class SetAnomalyDataset(data.Dataset):
    def __init__(self, img_feats: torch.Tensor, labels: torch.Tensor, set_size: int = 10, train: bool = True) -> None:
        super().__init__()
        self.img_feats, self.labels = img_feats, labels
        self.set_size = set_size - 1
        self.train = train
        self.num_labels = labels.max() + 1
        self.img_idx_by_label = torch.argsort(self.labels).reshape(self.num_labels, -1)
        if not train:
            self.test_sets = self._create_test_sets()

    def _create_test_sets(self) -> torch.Tensor:
        num_imgs = self.img_feats.shape[0]
        np.random.seed(42)
        return torch.stack([self.sample_img_set(self.labels[idx]) for idx in range(num_imgs)], dim=0)

    def sample_img_set(self, anomaly_label: torch.Tensor) -> torch.Tensor:
        set_label = np.random.randint(self.num_labels - 1)
        if set_label >= anomaly_label:
            set_label += 1
        img_indices = np.random.choice(self.img_idx_by_label.shape[1], size=self.set_size, replace=False)
        return self.img_idx_by_label[set_label, img_indices]

    def __len__(self) -> int:
        return self.img_feats.shape[0]

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        anomaly = self.img_feats[idx]
        img_indices = self.sample_img_set(self.labels[idx]) if self.train else self.test_sets[idx]
        img_set = torch.cat([self.img_feats[img_indices], anomaly[None]], dim=0)
        indices = torch.cat([img_indices, torch.LongTensor([idx])], dim=0)
        return img_set, indices, img_set.shape[0] - 1


class AnomalyPredictor(TransformerPredictor):
    def _calculate_loss(self, batch: Any, mode: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        img_sets, _, labels = batch
        preds = self.forward(img_sets, add_positional_encoding=False).squeeze(dim=-1)
        loss = F.cross_entropy(preds, labels)
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log(f"{mode}_loss", loss)
        self.log(f"{mode}_acc", acc, on_step=False, on_epoch=True)
        return loss, acc

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, _ = self._calculate_loss(batch, mode="train")
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        _ = self._calculate_loss(batch, mode="val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        _ = self._calculate_loss(batch, mode="test")


def anomaly_loaders() -> tuple[data.DataLoader, data.DataLoader, data.DataLoader, int]:
    g = torch.Generator().manual_seed(3)
    labels = torch.arange(8).repeat_interleave(16)  # 8 classes, 16 images each (12 train, 4 validation)
    feats = torch.randn(len(labels), 16, generator=g) + torch.randn(8, 16, generator=g)[labels]
    sorted_indices = torch.argsort(labels).reshape(8, -1)
    val_indices, train_indices = sorted_indices[:, :4].reshape(-1), sorted_indices[:, 4:].reshape(-1)
    test_labels = torch.arange(8).repeat_interleave(4)
    test_feats = torch.randn(len(test_labels), 16, generator=g)
    train_set = SetAnomalyDataset(feats[train_indices], labels[train_indices], set_size=5, train=True)
    val_set = SetAnomalyDataset(feats[val_indices], labels[val_indices], set_size=5, train=False)
    test_set = SetAnomalyDataset(test_feats, test_labels, set_size=5, train=False)
    train_loader = data.DataLoader(train_set, batch_size=16, shuffle=True, drop_last=True, num_workers=0, pin_memory=True)
    val_loader = data.DataLoader(val_set, batch_size=16, shuffle=False, drop_last=False, num_workers=0)
    test_loader = data.DataLoader(test_set, batch_size=16, shuffle=False, drop_last=False, num_workers=0)
    return train_loader, val_loader, test_loader, train_set.img_feats.shape[-1]


def train_anomaly(root_dir: str, max_epochs: int, **kwargs: Any) -> tuple[Any, Any, dict[str, Any]]:
    train_anom_loader, val_anom_loader, test_anom_loader, input_dim = anomaly_loaders()
    root_dir = os.path.join(root_dir, "SetAnomalyTask")
    os.makedirs(root_dir, exist_ok=True)
    trainer = pl.Trainer(
        default_root_dir=root_dir,
        callbacks=[ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc")],
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        gradient_clip_val=2,
        enable_progress_bar=False,
    )
    trainer.logger._default_hp_metric = None
    trained = AnomalyPredictor(input_dim=input_dim, max_iters=trainer.max_epochs * len(train_anom_loader), **kwargs)
    trainer.fit(trained, train_anom_loader, val_anom_loader)
    model = AnomalyPredictor.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    train_result = trainer.test(model, dataloaders=train_anom_loader, verbose=False)
    val_result = trainer.test(model, dataloaders=val_anom_loader, verbose=False)
    test_result = trainer.test(model, dataloaders=test_anom_loader, verbose=False)
    result = {"test_acc": test_result[0]["test_acc"], "val_acc": val_result[0]["test_acc"], "train_acc": train_result[0]["test_acc"],
              "val": val_result[0], "best": model}
    return trained, trainer, result


def main(root_dir: str | Path, precision: str = "32-true", task: str = "reverse", max_epochs: int = 2) -> dict[str, Any]:
    """One of the notebook's two tasks, after its first cell's `seed_everything(42)`."""
    pl.seed_everything(42)
    if task == "reverse":
        dataset = partial(ReverseDataset, 10, 6)
        train_loader = data.DataLoader(dataset(128), batch_size=32, shuffle=True, drop_last=True, pin_memory=True)
        val_loader = data.DataLoader(dataset(32), batch_size=32)
        test_loader = data.DataLoader(dataset(32), batch_size=32)
        model, trainer, result = train_reverse(str(root_dir), train_loader, val_loader, test_loader, max_epochs,
                                               input_dim=10, model_dim=16, num_heads=1, num_classes=10, num_layers=1,
                                               dropout=0.0, lr=5e-4, warmup=5)
    else:
        model, trainer, result = train_anomaly(str(root_dir), max_epochs, model_dim=16, num_heads=2, num_classes=1, num_layers=1,
                                               dropout=0.1, input_dropout=0.1, lr=5e-4, warmup=5)
    return {"model": model, "trainer": trainer, "fit_metrics": dict(trainer.callback_metrics), **result}
