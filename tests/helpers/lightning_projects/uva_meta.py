"""The UvA deep-learning course's Tutorial 16, "Meta-Learning - Learning to Learn"
(course_UvA-DL/12-meta-learning in Lightning's tutorials), with only its imports changed:
the FewShotBatchSampler and TaskBatchSampler (shuffling with `torch.randperm` and
`random.shuffle` while the loader is read, a collate function that returns a list of tasks),
ProtoNet, and ProtoMAML, whose `training_step` steps `self.optimizers()` itself and returns
None under automatic optimization, and whose `validation_step` turns gradients on with
`torch.set_grad_enabled(True)` to fine-tune a `deepcopy` of the network; the notebook's
`train_model` (ModelCheckpoint on `val_acc` with `save_weights_only=True`,
`LearningRateMonitor("epoch")`, `enable_progress_bar=False`, `trainer.logger._default_hp_metric`,
`load_from_checkpoint(trainer.checkpoint_callback.best_model_path)`).

Shrunk or substituted: CIFAR100 is 16 synthetic classes of 16 images of 3x8x8 (torchvision is
not installed), split 10/6 into train and validation classes; torchvision's DenseNet is a
small conv net with BatchNorm (`get_convnet`); tasks of 2 instead of 16 for ProtoMAML; 2 epochs
instead of 200 and the scheduler's milestones scaled with them; no worker processes;
`accelerator="cpu"`.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from copy import deepcopy
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


class ImageDataset(data.Dataset):
    def __init__(self, imgs, targets, img_transform=None):
        super().__init__()
        self.img_transform = img_transform
        self.imgs = imgs
        self.targets = targets

    def __getitem__(self, idx):
        img, target = self.imgs[idx], self.targets[idx]
        if self.img_transform is not None:
            img = self.img_transform(img)
        return img, target

    def __len__(self):
        return self.imgs.shape[0]


def random_flip(img):
    """The notebook's RandomHorizontalFlip: a draw from torch's stream per image."""
    return img.flip(-1) if torch.rand(1) < 0.5 else img


def dataset_from_labels(imgs, targets, class_set, **kwargs):
    class_mask = (targets[:, None] == class_set[None, :]).any(dim=-1)
    return ImageDataset(imgs=imgs[class_mask], targets=targets[class_mask], **kwargs)


class FewShotBatchSampler:
    def __init__(self, dataset_targets, N_way, K_shot, include_query=False, shuffle=True, shuffle_once=False):
        super().__init__()
        self.dataset_targets = dataset_targets
        self.N_way = N_way
        self.K_shot = K_shot
        self.shuffle = shuffle
        self.include_query = include_query
        if self.include_query:
            self.K_shot *= 2
        self.batch_size = self.N_way * self.K_shot  # Number of overall images per batch
        # Organize examples by class
        self.classes = torch.unique(self.dataset_targets).tolist()
        self.num_classes = len(self.classes)
        self.indices_per_class = {}
        self.batches_per_class = {}  # Number of K-shot batches that each class can provide
        for c in self.classes:
            self.indices_per_class[c] = torch.where(self.dataset_targets == c)[0]
            self.batches_per_class[c] = self.indices_per_class[c].shape[0] // self.K_shot
        # Create a list of classes from which we select the N classes per batch
        self.iterations = sum(self.batches_per_class.values()) // self.N_way
        self.class_list = [c for c in self.classes for _ in range(self.batches_per_class[c])]
        if shuffle_once or self.shuffle:
            self.shuffle_data()
        else:
            # For testing, we iterate over classes instead of shuffling them
            sort_idxs = [
                i + p * self.num_classes for i, c in enumerate(self.classes) for p in range(self.batches_per_class[c])
            ]
            self.class_list = np.array(self.class_list)[np.argsort(sort_idxs)].tolist()

    def shuffle_data(self):
        # Shuffle the examples per class
        for c in self.classes:
            perm = torch.randperm(self.indices_per_class[c].shape[0])
            self.indices_per_class[c] = self.indices_per_class[c][perm]
        # Shuffle the class list from which we sample.
        random.shuffle(self.class_list)

    def __iter__(self):
        # Shuffle data
        if self.shuffle:
            self.shuffle_data()
        # Sample few-shot batches
        start_index = defaultdict(int)
        for it in range(self.iterations):
            class_batch = self.class_list[it * self.N_way : (it + 1) * self.N_way]  # Select N classes for the batch
            index_batch = []
            for c in class_batch:  # For each class, select the next K examples and add them to the batch
                index_batch.extend(self.indices_per_class[c][start_index[c] : start_index[c] + self.K_shot])
                start_index[c] += self.K_shot
            if self.include_query:  # If we return support+query set, sort them so that they are easy to split
                index_batch = index_batch[::2] + index_batch[1::2]
            yield index_batch

    def __len__(self):
        return self.iterations


def split_batch(imgs, targets):
    support_imgs, query_imgs = imgs.chunk(2, dim=0)
    support_targets, query_targets = targets.chunk(2, dim=0)
    return support_imgs, query_imgs, support_targets, query_targets


def get_convnet(output_size):
    """A small stand-in for the notebook's torchvision DenseNet (with its BatchNorm)."""
    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, kernel_size=3, padding=1, stride=2), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, output_size),
    )


class ProtoNet(pl.LightningModule):
    def __init__(self, proto_dim, lr):
        super().__init__()
        self.save_hyperparameters()
        self.model = get_convnet(output_size=self.hparams.proto_dim)

    def configure_optimizers(self):
        optimizer = optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 2], gamma=0.1)
        return [optimizer], [scheduler]

    @staticmethod
    def calculate_prototypes(features, targets):
        classes, _ = torch.unique(targets).sort()  # Determine which classes we have
        prototypes = []
        for c in classes:
            p = features[torch.where(targets == c)[0]].mean(dim=0)  # Average class feature vectors
            prototypes.append(p)
        prototypes = torch.stack(prototypes, dim=0)
        return prototypes, classes

    def classify_feats(self, prototypes, classes, feats, targets):
        dist = torch.pow(prototypes[None, :] - feats[:, None], 2).sum(dim=2)  # Squared euclidean distance
        preds = F.log_softmax(-dist, dim=1)
        labels = (classes[None, :] == targets[:, None]).long().argmax(dim=-1)
        acc = (preds.argmax(dim=1) == labels).float().mean()
        return preds, labels, acc

    def calculate_loss(self, batch, mode):
        imgs, targets = batch
        features = self.model(imgs)  # Encode all images of support and query set
        support_feats, query_feats, support_targets, query_targets = split_batch(features, targets)
        prototypes, classes = ProtoNet.calculate_prototypes(support_feats, support_targets)
        preds, labels, acc = self.classify_feats(prototypes, classes, query_feats, query_targets)
        loss = F.cross_entropy(preds, labels)
        self.log(f"{mode}_loss", loss)
        self.log(f"{mode}_acc", acc)
        return loss

    def training_step(self, batch, batch_idx):
        return self.calculate_loss(batch, mode="train")

    def validation_step(self, batch, batch_idx):
        self.calculate_loss(batch, mode="val")


class ProtoMAML(pl.LightningModule):
    def __init__(self, proto_dim, lr, lr_inner, lr_output, num_inner_steps):
        super().__init__()
        self.save_hyperparameters()
        self.model = get_convnet(output_size=self.hparams.proto_dim)

    def configure_optimizers(self):
        optimizer = optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 2], gamma=0.1)
        return [optimizer], [scheduler]

    def run_model(self, local_model, output_weight, output_bias, imgs, labels):
        feats = local_model(imgs)
        preds = F.linear(feats, output_weight, output_bias)
        loss = F.cross_entropy(preds, labels)
        acc = (preds.argmax(dim=1) == labels).float()
        return loss, preds, acc

    def adapt_few_shot(self, support_imgs, support_targets):
        # Determine prototype initialization
        support_feats = self.model(support_imgs)
        prototypes, classes = ProtoNet.calculate_prototypes(support_feats, support_targets)
        support_labels = (classes[None, :] == support_targets[:, None]).long().argmax(dim=-1)
        # Create inner-loop model and optimizer
        local_model = deepcopy(self.model)
        local_model.train()
        local_optim = optim.SGD(local_model.parameters(), lr=self.hparams.lr_inner)
        local_optim.zero_grad()
        # Create output layer weights with prototype-based initialization
        init_weight = 2 * prototypes
        init_bias = -(torch.norm(prototypes, dim=1) ** 2)
        output_weight = init_weight.detach().requires_grad_()
        output_bias = init_bias.detach().requires_grad_()
        # Optimize inner loop model on support set
        for _ in range(self.hparams.num_inner_steps):
            loss, _, _ = self.run_model(local_model, output_weight, output_bias, support_imgs, support_labels)
            loss.backward()
            local_optim.step()
            output_weight.data -= self.hparams.lr_output * output_weight.grad
            output_bias.data -= self.hparams.lr_output * output_bias.grad
            local_optim.zero_grad()
            output_weight.grad.fill_(0)
            output_bias.grad.fill_(0)
        # Re-attach computation graph of prototypes
        output_weight = (output_weight - init_weight).detach() + init_weight
        output_bias = (output_bias - init_bias).detach() + init_bias
        return local_model, output_weight, output_bias, classes

    def outer_loop(self, batch, mode="train"):
        accuracies = []
        losses = []
        self.model.zero_grad()
        # Determine gradients for batch of tasks
        for task_batch in batch:
            imgs, targets = task_batch
            support_imgs, query_imgs, support_targets, query_targets = split_batch(imgs, targets)
            local_model, output_weight, output_bias, classes = self.adapt_few_shot(support_imgs, support_targets)
            query_labels = (classes[None, :] == query_targets[:, None]).long().argmax(dim=-1)
            loss, preds, acc = self.run_model(local_model, output_weight, output_bias, query_imgs, query_labels)
            if mode == "train":
                loss.backward()
                for p_global, p_local in zip(self.model.parameters(), local_model.parameters()):
                    p_global.grad += p_local.grad  # First-order approx. -> add gradients of finetuned and base model
            accuracies.append(acc.mean().detach())
            losses.append(loss.detach())
        # Perform update of base model
        if mode == "train":
            opt = self.optimizers()
            opt.step()
            opt.zero_grad()
        self.log(f"{mode}_loss", sum(losses) / len(losses))
        self.log(f"{mode}_acc", sum(accuracies) / len(accuracies))

    def training_step(self, batch, batch_idx):
        self.outer_loop(batch, mode="train")
        return None  # Returning None means we skip the default training optimizer steps by PyTorch Lightning

    def validation_step(self, batch, batch_idx):
        # Validation requires to finetune a model, hence we need to enable gradients
        torch.set_grad_enabled(True)
        self.outer_loop(batch, mode="val")
        torch.set_grad_enabled(False)


class TaskBatchSampler:
    def __init__(self, dataset_targets, batch_size, N_way, K_shot, include_query=False, shuffle=True):
        super().__init__()
        self.batch_sampler = FewShotBatchSampler(dataset_targets, N_way, K_shot, include_query, shuffle)
        self.task_batch_size = batch_size
        self.local_batch_size = self.batch_sampler.batch_size

    def __iter__(self):
        batch_list = []
        for batch_idx, batch in enumerate(self.batch_sampler):
            batch_list.extend(batch)
            if (batch_idx + 1) % self.task_batch_size == 0:
                yield batch_list
                batch_list = []

    def __len__(self):
        return len(self.batch_sampler) // self.task_batch_size

    def get_collate_fn(self):
        def collate_fn(item_list):
            imgs = torch.stack([img for img, target in item_list], dim=0)
            targets = torch.stack([target for img, target in item_list], dim=0)
            imgs = imgs.chunk(self.task_batch_size, dim=0)
            targets = targets.chunk(self.task_batch_size, dim=0)
            return list(zip(imgs, targets))

        return collate_fn


def main(root_dir: str | Path, precision: str = "32-true", model: str = "protonet", max_epochs: int = 2,
         inference_mode: bool | None = None) -> dict[str, Any]:
    """`model`: "protonet" or "protomaml". `inference_mode`: passed to the Trainer when given
    (the notebook leaves it at the default)."""
    CHECKPOINT_PATH = str(root_dir)
    pl.seed_everything(42)
    g = torch.Generator().manual_seed(7)
    all_images = torch.rand(16 * 16, 3, 8, 8, generator=g)
    all_targets = torch.arange(16).repeat_interleave(16)
    pl.seed_everything(0)  # Set seed for reproducibility
    classes = torch.randperm(16)
    train_classes, val_classes = classes[:10], classes[10:]
    train_set = dataset_from_labels(all_images, all_targets, train_classes, img_transform=random_flip)
    val_set = dataset_from_labels(all_images, all_targets, val_classes)
    N_WAY, K_SHOT = 5, 4
    trainer_options = {} if inference_mode is None else {"inference_mode": inference_mode}

    def train_model(model_class, train_loader, val_loader, **kwargs):
        trainer = pl.Trainer(
            default_root_dir=os.path.join(CHECKPOINT_PATH, model_class.__name__),
            accelerator="cpu",
            devices=1,
            max_epochs=max_epochs,
            precision=precision,
            callbacks=[
                ModelCheckpoint(save_weights_only=True, mode="max", monitor="val_acc"),
                LearningRateMonitor("epoch"),
            ],
            enable_progress_bar=False,
            **trainer_options,
        )
        trainer.logger._default_hp_metric = None
        pl.seed_everything(42)  # To be reproducible
        model = model_class(**kwargs)
        trainer.fit(model, train_loader, val_loader)
        trained = model
        model = model_class.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)  # Load best checkpoint
        return {"model": trained, "best": model, "trainer": trainer}

    if model == "protonet":
        train_data_loader = data.DataLoader(
            train_set,
            batch_sampler=FewShotBatchSampler(train_set.targets, include_query=True, N_way=N_WAY, K_shot=K_SHOT, shuffle=True),
        )
        val_data_loader = data.DataLoader(
            val_set,
            batch_sampler=FewShotBatchSampler(val_set.targets, include_query=True, N_way=N_WAY, K_shot=K_SHOT,
                                              shuffle=False, shuffle_once=True),
        )
        result = train_model(ProtoNet, proto_dim=16, lr=2e-4, train_loader=train_data_loader, val_loader=val_data_loader)
    else:
        train_protomaml_sampler = TaskBatchSampler(train_set.targets, include_query=True, N_way=N_WAY, K_shot=K_SHOT, batch_size=2)
        train_protomaml_loader = data.DataLoader(
            train_set, batch_sampler=train_protomaml_sampler, collate_fn=train_protomaml_sampler.get_collate_fn()
        )
        val_protomaml_sampler = TaskBatchSampler(val_set.targets, include_query=True, N_way=N_WAY, K_shot=K_SHOT,
                                                 batch_size=1, shuffle=False)
        val_protomaml_loader = data.DataLoader(
            val_set, batch_sampler=val_protomaml_sampler, collate_fn=val_protomaml_sampler.get_collate_fn()
        )
        result = train_model(ProtoMAML, proto_dim=16, lr=1e-3, lr_inner=0.1, lr_output=0.1, num_inner_steps=1,
                             train_loader=train_protomaml_loader, val_loader=val_protomaml_loader)
    return result
