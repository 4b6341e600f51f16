"""The UvA deep-learning course's Tutorial 15, "Vision Transformers" (course_UvA-DL/11-vision-transformer
in Lightning's tutorials), with only its imports changed: images to patches, pre-LayerNorm
attention blocks with dropout, a CLS token and positional embeddings as parameters, the ViT
LightningModule (`save_hyperparameters`, `example_input_array = next(iter(train_loader))[0]`,
AdamW with MultiStepLR), the notebook's `train_model` (ModelCheckpoint on `val_acc` with
`mode="max"` and `save_weights_only=True`, `LearningRateMonitor("epoch")`,
`trainer.logger._log_graph = True`, `_default_hp_metric = None`, `pl.seed_everything(42)` before
the model, `ViT.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)`) and
`trainer.test` of the best model on the validation and test loaders.

Shrunk or substituted: CIFAR10 is 64/32/32 synthetic 3x8x8 images (torchvision is not
installed; the random flip of the training transform is drawn from torch's stream in the
dataset, the resized crop left out); embed_dim 8, hidden_dim 16, 2 heads, 1 layer, patches of 4
(the notebook: 256, 512, 8, 6, 4 on 32x32); 2 epochs instead of 180 and the milestones scaled
with them; batches of 32, no worker processes unless `num_workers` is given (the notebook: 4);
`accelerator="cpu"`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import LearningRateMonitor, ModelCheckpoint

train_loader: Any = None  # the notebook's global, set by `main` (ViT's example input comes from it)


class SyntheticCIFAR(data.Dataset):
    def __init__(self, n: int, seed: int, train: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.imgs = torch.randn(n, 3, 8, 8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.train = train

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, idx: int) -> Any:
        img = self.imgs[idx]
        if self.train and torch.rand(1) < 0.5:  # RandomHorizontalFlip
            img = img.flip(-1)
        return img, self.labels[idx]


def img_to_patch(x, patch_size, flatten_channels=True):
    """
    Args:
        x: Tensor representing the image of shape [B, C, H, W]
        patch_size: Number of pixels per dimension of the patches (integer)
        flatten_channels: If True, the patches will be returned in a flattened format
                           as a feature vector instead of a image grid.
    """
    B, C, H, W = x.shape
    x = x.reshape(B, C, H // patch_size, patch_size, W // patch_size, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5)  # [B, H', W', C, p_H, p_W]
    x = x.flatten(1, 2)  # [B, H'*W', C, p_H, p_W]
    if flatten_channels:
        x = x.flatten(2, 4)  # [B, H'*W', C*p_H*p_W]
    return x


class AttentionBlock(nn.Module):
    def __init__(self, embed_dim, hidden_dim, num_heads, dropout=0.0):
        """Attention Block.
        Args:
            embed_dim: Dimensionality of input and attention feature vectors
            hidden_dim: Dimensionality of hidden layer in feed-forward network
                         (usually 2-4x larger than embed_dim)
            num_heads: Number of heads to use in the Multi-Head Attention block
            dropout: Amount of dropout to apply in the feed-forward network
        """
        super().__init__()
        self.layer_norm_1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads)
        self.layer_norm_2 = nn.LayerNorm(embed_dim)
        self.linear = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, embed_dim),
            nn.Dropout(dropout),
        )
    def forward(self, x):
        inp_x = self.layer_norm_1(x)
        x = x + self.attn(inp_x, inp_x, inp_x)[0]
        x = x + self.linear(self.layer_norm_2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(
        self,
        embed_dim,
        hidden_dim,
        num_channels,
        num_heads,
        num_layers,
        num_classes,
        patch_size,
        num_patches,
        dropout=0.0,
    ):
        """Vision Transformer.
        Args:
            embed_dim: Dimensionality of the input feature vectors to the Transformer
            hidden_dim: Dimensionality of the hidden layer in the feed-forward networks
                         within the Transformer
            num_channels: Number of channels of the input (3 for RGB)
            num_heads: Number of heads to use in the Multi-Head Attention block
            num_layers: Number of layers to use in the Transformer
            num_classes: Number of classes to predict
            patch_size: Number of pixels that the patches have per dimension
            num_patches: Maximum number of patches an image can have
            dropout: Amount of dropout to apply in the feed-forward network and
                      on the input encoding
        """
        super().__init__()
        self.patch_size = patch_size
        # Layers/Networks
        self.input_layer = nn.Linear(num_channels * (patch_size**2), embed_dim)
        self.transformer = nn.Sequential(
            *(AttentionBlock(embed_dim, hidden_dim, num_heads, dropout=dropout) for _ in range(num_layers))
        )
        self.mlp_head = nn.Sequential(nn.LayerNorm(embed_dim), nn.Linear(embed_dim, num_classes))
        self.dropout = nn.Dropout(dropout)
        # Parameters/Embeddings
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, 1 + num_patches, embed_dim))
    def forward(self, x):
        # Preprocess input
        x = img_to_patch(x, self.patch_size)
        B, T, _ = x.shape
        x = self.input_layer(x)
        # Add CLS token and positional encoding
        cls_token = self.cls_token.repeat(B, 1, 1)
        x = torch.cat([cls_token, x], dim=1)
        x = x + self.pos_embedding[:, : T + 1]
        # Apply Transforrmer
        x = self.dropout(x)
        x = x.transpose(0, 1)
        x = self.transformer(x)
        # Perform classification prediction
        cls = x[0]
        out = self.mlp_head(cls)
        return out


class ViT(pl.LightningModule):
    def __init__(self, model_kwargs, lr):
        super().__init__()
        self.save_hyperparameters()
        self.model = VisionTransformer(**model_kwargs)
        self.example_input_array = next(iter(train_loader))[0]
    def forward(self, x):
        return self.model(x)
    def configure_optimizers(self):
        optimizer = optim.AdamW(self.parameters(), lr=self.hparams.lr)
        lr_scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 2], gamma=0.1)
        return [optimizer], [lr_scheduler]
    def _calculate_loss(self, batch, mode="train"):
        imgs, labels = batch
        preds = self.model(imgs)
        loss = F.cross_entropy(preds, labels)
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log(f"{mode}_loss", loss)
        self.log(f"{mode}_acc", acc)
        return loss
    def training_step(self, batch, batch_idx):
        loss = self._calculate_loss(batch, mode="train")
        return loss
    def validation_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="val")
    def test_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="test")


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 2, num_workers: int = 0) -> dict[str, Any]:
    """`num_workers`: the loaders' worker processes (the notebook's 4; none by default here)."""
    global train_loader
    CHECKPOINT_PATH = str(root_dir)
    pl.seed_everything(42)
    train_dataset = SyntheticCIFAR(96, seed=0, train=True)
    val_dataset = SyntheticCIFAR(96, seed=0, train=False)
    pl.seed_everything(42)
    train_set, _ = torch.utils.data.random_split(train_dataset, [64, 32])
    pl.seed_everything(42)
    _, val_set = torch.utils.data.random_split(val_dataset, [64, 32])
    test_set = SyntheticCIFAR(32, seed=1, train=False)
    train_loader = data.DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True, pin_memory=True, num_workers=num_workers)
    val_loader = data.DataLoader(val_set, batch_size=32, shuffle=False, drop_last=False, num_workers=num_workers)
    test_loader = data.DataLoader(test_set, batch_size=32, shuffle=False, drop_last=False, num_workers=num_workers)

    def train_model(**kwargs):
        trainer = pl.Trainer(
            default_root_dir=os.path.join(CHECKPOINT_PATH, "ViT"),
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            precision=precision,
            callbacks=[
                ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc"),
                LearningRateMonitor("epoch"),
            ],
        )
        trainer.logger._log_graph = True  # If True, we plot the computation graph in tensorboard
        trainer.logger._default_hp_metric = None  # Optional logging argument that we don't need
        pl.seed_everything(42)  # To be reproducible
        model = ViT(**kwargs)
        trainer.fit(model, train_loader, val_loader)
        trained = model
        # Load best checkpoint after training
        model = ViT.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
        val_result = trainer.test(model, dataloaders=val_loader, verbose=False)
        test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
        result = {"test": test_result[0]["test_acc"], "val": val_result[0]["test_acc"]}
        return model, trained, trainer, result, (val_result[0], test_result[0])

    best, trained, trainer, result, tests = train_model(
        model_kwargs={
            "embed_dim": 8,
            "hidden_dim": 16,
            "num_heads": 2,
            "num_layers": 1,
            "patch_size": 4,
            "num_channels": 3,
            "num_patches": 4,
            "num_classes": 10,
            "dropout": 0.2,
        },
        lr=3e-4,
    )
    return {"model": trained, "best": best, "trainer": trainer, "val": tests[0], "test": tests[1], "result": result}
