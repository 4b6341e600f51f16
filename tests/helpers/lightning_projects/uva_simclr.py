"""The UvA deep-learning course's Tutorial 17, "Self-Supervised Contrastive Learning with SimCLR"
(course_UvA-DL/13-contrastive-learning in Lightning's tutorials), with only its imports changed:
SimCLR (two augmented views per image as a list in the batch, InfoNCE loss, AdamW with
CosineAnnealingLR, ranking metrics), `train_simclr` (ModelCheckpoint on `val_acc_top5`,
`LearningRateMonitor("epoch")`, `trainer.logger._default_hp_metric = None`,
`load_from_checkpoint(trainer.checkpoint_callback.best_model_path)`), then the features of the
best model's backbone and `train_logreg`: logistic regression on them with
`check_val_every_n_epoch`, MultiStepLR, ModelCheckpoint on `val_acc`, the best checkpoint
loaded and `trainer.test` on the (shuffled) train loader and the test loader.

Shrunk or substituted: STL10 is synthetic 3x8x8 images of 10 classes (torchvision is not
installed); the augmentations are a random flip and random noise drawn from torch's stream in
the dataset (in the main process, as with the notebook's transforms and no workers);
torchvision's resnet18 is a small conv net with the same `fc` head arrangement; 2 SimCLR
epochs instead of 500, 4 logistic-regression epochs validating every 2 (the notebook: 100,
every 10), one training-set size (4 images per class) instead of six, batches of 16; no
worker processes; `accelerator="cpu"`. The supervised ResNet baseline is left out (the
logistic regression's pattern again).
"""

from __future__ import annotations

import os
from copy import deepcopy
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data

import trainer as pl
from callbacks import LearningRateMonitor, ModelCheckpoint

device = torch.device("cpu")
NUM_WORKERS = 0


class SyntheticSTL(data.Dataset):
    """Images with labels; `transform` applied per item, as torchvision's datasets do."""

    def __init__(self, n: int, seed: int, transform: Any = None) -> None:
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.arange(n) % 10
        self.imgs = torch.rand(n, 3, 8, 8, generator=g) * 2 - 1 + self.labels.view(-1, 1, 1, 1) * 0.05
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, idx: int) -> Any:
        img = self.imgs[idx]
        return (self.transform(img) if self.transform is not None else img), self.labels[idx]


def contrast_transforms(img: torch.Tensor) -> torch.Tensor:
    """Stand-in for the notebook's random flip, crop, color jitter, grayscale and blur."""
    if torch.rand(1) < 0.5:
        img = img.flip(-1)
    return img + 0.1 * torch.randn_like(img)


class ContrastiveTransformations:
    def __init__(self, base_transforms, n_views=2):
        self.base_transforms = base_transforms
        self.n_views = n_views

    def __call__(self, x):
        return [self.base_transforms(x) for i in range(self.n_views)]


class SmallResNet(nn.Module):
    """A small stand-in for torchvision's resnet18 (a backbone, then the `fc` layer)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(self.body(x))


class SimCLR(pl.LightningModule):
    def __init__(self, hidden_dim, lr, temperature, weight_decay, max_epochs=500):
        super().__init__()
        self.save_hyperparameters()
        assert self.hparams.temperature > 0.0, "The temperature must be a positive float!"
        # Base model f(.)
        self.convnet = SmallResNet(num_classes=4 * hidden_dim)  # num_classes is the output size of the last linear layer
        # The MLP for g(.) consists of Linear->ReLU->Linear
        self.convnet.fc = nn.Sequential(
            self.convnet.fc,  # Linear(ResNet output, 4*hidden_dim)
            nn.ReLU(inplace=True),
            nn.Linear(4 * hidden_dim, hidden_dim),
        )

    def configure_optimizers(self):
        optimizer = optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        lr_scheduler = optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=self.hparams.max_epochs, eta_min=self.hparams.lr / 50
        )
        return [optimizer], [lr_scheduler]

    def info_nce_loss(self, batch, mode="train"):
        imgs, _ = batch
        imgs = torch.cat(imgs, dim=0)
        # Encode all images
        feats = self.convnet(imgs)
        # Calculate cosine similarity
        cos_sim = F.cosine_similarity(feats[:, None, :], feats[None, :, :], dim=-1)
        # Mask out cosine similarity to itself
        self_mask = torch.eye(cos_sim.shape[0], dtype=torch.bool, device=cos_sim.device)
        cos_sim.masked_fill_(self_mask, -9e15)
        # Find positive example -> batch_size//2 away from the original example
        pos_mask = self_mask.roll(shifts=cos_sim.shape[0] // 2, dims=0)
        # InfoNCE loss
        cos_sim = cos_sim / self.hparams.temperature
        nll = -cos_sim[pos_mask] + torch.logsumexp(cos_sim, dim=-1)
        nll = nll.mean()
        # Logging loss
        self.log(mode + "_loss", nll)
        # Get ranking position of positive example
        comb_sim = torch.cat(
            [cos_sim[pos_mask][:, None], cos_sim.masked_fill(pos_mask, -9e15)],  # First position positive example
            dim=-1,
        )
        sim_argsort = comb_sim.argsort(dim=-1, descending=True).argmin(dim=-1)
        # Logging ranking metrics
        self.log(mode + "_acc_top1", (sim_argsort == 0).float().mean())
        self.log(mode + "_acc_top5", (sim_argsort < 5).float().mean())
        self.log(mode + "_acc_mean_pos", 1 + sim_argsort.float().mean())
        return nll

    def training_step(self, batch, batch_idx):
        return self.info_nce_loss(batch, mode="train")

    def validation_step(self, batch, batch_idx):
        self.info_nce_loss(batch, mode="val")


class LogisticRegression(pl.LightningModule):
    def __init__(self, feature_dim, num_classes, lr, weight_decay, max_epochs=100):
        super().__init__()
        self.save_hyperparameters()
        # Mapping from representation h to classes
        self.model = nn.Linear(feature_dim, num_classes)

    def configure_optimizers(self):
        optimizer = optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        lr_scheduler = optim.lr_scheduler.MultiStepLR(
            optimizer, milestones=[int(self.hparams.max_epochs * 0.6), int(self.hparams.max_epochs * 0.8)], gamma=0.1
        )
        return [optimizer], [lr_scheduler]

    def _calculate_loss(self, batch, mode="train"):
        feats, labels = batch
        preds = self.model(feats)
        loss = F.cross_entropy(preds, labels)
        acc = (preds.argmax(dim=-1) == labels).float().mean()
        self.log(mode + "_loss", loss)
        self.log(mode + "_acc", acc)
        return loss

    def training_step(self, batch, batch_idx):
        return self._calculate_loss(batch, mode="train")

    def validation_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="val")

    def test_step(self, batch, batch_idx):
        self._calculate_loss(batch, mode="test")


@torch.no_grad()
def prepare_data_features(model, dataset):
    # Prepare model
    network = deepcopy(model.convnet)
    network.fc = nn.Identity()  # Removing projection head g(.)
    network.eval()
    network.to(device)
    # Encode all images
    data_loader = data.DataLoader(dataset, batch_size=64, num_workers=NUM_WORKERS, shuffle=False, drop_last=False)
    feats, labels = [], []
    for batch_imgs, batch_labels in data_loader:
        batch_imgs = batch_imgs.to(device)
        batch_feats = network(batch_imgs)
        feats.append(batch_feats.detach().cpu())
        labels.append(batch_labels)
    feats = torch.cat(feats, dim=0)
    labels = torch.cat(labels, dim=0)
    # Sort images by labels
    labels, idxs = labels.sort()
    feats = feats[idxs]
    return data.TensorDataset(feats, labels)


def get_smaller_dataset(original_dataset, num_imgs_per_label):
    new_dataset = data.TensorDataset(
        *(t.unflatten(0, (10, 8))[:, :num_imgs_per_label].flatten(0, 1) for t in original_dataset.tensors)
    )
    return new_dataset


def main(root_dir: str | Path, precision: str = "32-true", simclr_epochs: int = 2, logreg_epochs: int = 4) -> dict[str, Any]:
    CHECKPOINT_PATH = str(root_dir)
    pl.seed_everything(42)
    unlabeled_data = SyntheticSTL(64, seed=0, transform=ContrastiveTransformations(contrast_transforms, n_views=2))
    train_data_contrast = SyntheticSTL(32, seed=1, transform=ContrastiveTransformations(contrast_transforms, n_views=2))

    def train_simclr(batch_size, max_epochs=500, **kwargs):
        trainer = pl.Trainer(
            default_root_dir=os.path.join(CHECKPOINT_PATH, "SimCLR"),
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            precision=precision,
            callbacks=[
                ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc_top5"),
                LearningRateMonitor("epoch"),
            ],
        )
        trainer.logger._default_hp_metric = None  # Optional logging argument that we don't need
        train_loader = data.DataLoader(
            unlabeled_data, batch_size=batch_size, shuffle=True, drop_last=True, pin_memory=True, num_workers=NUM_WORKERS
        )
        val_loader = data.DataLoader(
            train_data_contrast, batch_size=batch_size, shuffle=False, drop_last=False, pin_memory=True, num_workers=NUM_WORKERS
        )
        pl.seed_everything(42)  # To be reproducible
        model = SimCLR(max_epochs=max_epochs, **kwargs)
        trainer.fit(model, train_loader, val_loader)
        trained = model
        model = SimCLR.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)  # Load best checkpoint after training
        return model, trained, trainer

    simclr_model, simclr_trained, simclr_trainer = train_simclr(
        batch_size=16, hidden_dim=8, lr=5e-4, temperature=0.07, weight_decay=1e-4, max_epochs=simclr_epochs
    )
    train_img_data = SyntheticSTL(80, seed=2)
    test_img_data = SyntheticSTL(20, seed=3)
    train_feats_simclr = prepare_data_features(simclr_model, train_img_data)
    test_feats_simclr = prepare_data_features(simclr_model, test_img_data)

    def train_logreg(batch_size, train_feats_data, test_feats_data, model_suffix, max_epochs=100, **kwargs):
        trainer = pl.Trainer(
            default_root_dir=os.path.join(CHECKPOINT_PATH, "LogisticRegression"),
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            precision=precision,
            callbacks=[
                ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc"),
                LearningRateMonitor("epoch"),
            ],
            enable_progress_bar=False,
            check_val_every_n_epoch=2,
        )
        trainer.logger._default_hp_metric = None
        train_loader = data.DataLoader(
            train_feats_data, batch_size=batch_size, shuffle=True, drop_last=False, pin_memory=True, num_workers=0
        )
        test_loader = data.DataLoader(
            test_feats_data, batch_size=batch_size, shuffle=False, drop_last=False, pin_memory=True, num_workers=0
        )
        pl.seed_everything(42)  # To be reproducible
        model = LogisticRegression(**kwargs)
        trainer.fit(model, train_loader, test_loader)
        trained = model
        model = LogisticRegression.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
        # Test best model on train and validation set
        train_result = trainer.test(model, dataloaders=train_loader, verbose=False)
        test_result = trainer.test(model, dataloaders=test_loader, verbose=False)
        result = {"train": train_result[0]["test_acc"], "test": test_result[0]["test_acc"]}
        return model, trained, trainer, result, (train_result[0], test_result[0])

    sub_train_set = get_smaller_dataset(train_feats_simclr, 4)
    best, trained, trainer, result, tests = train_logreg(
        batch_size=16, train_feats_data=sub_train_set, test_feats_data=test_feats_simclr, model_suffix=4,
        feature_dim=train_feats_simclr.tensors[0].shape[1], num_classes=10, lr=1e-3, weight_decay=1e-3,
        max_epochs=logreg_epochs,
    )
    return {"model": trained, "best": best, "trainer": trainer, "train_test": tests[0], "test": tests[1],
            "result": result, "simclr": {"model": simclr_trained, "best": simclr_model, "trainer": simclr_trainer},
            "features": (train_feats_simclr, test_feats_simclr)}
