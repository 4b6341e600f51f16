"""One-class anomaly detection on machine sounds with Deep SVDD, from xir4n/eusipcoxz2026
(`experiments/experiment_base.py`: `Checkpoint`, `BaseExperiment`; `experiments/murenn_svdd.py`:
`MurennExperiment`; `data/mimii_oneclass.py`: `MIMII_OneClass`).

Kept as written: an experiment that is both an `ABC`/`nn.Module` base and a `LightningModule`
and builds its own `Trainer` in `__init__`, assigned to `self.trainer` before any fit (with a
`TensorBoardLogger(save_dir=...)`, `limit_val_batches=1.0`, `limit_test_batches=1.0`,
`log_every_n_steps=1`), then `run()`: `trainer.fit(self, self.dataset)` with the DataModule as the
second positional argument, and `trainer.test(self, self.dataset)`; a `ModelCheckpoint` subclass
that saves `initial.ckpt` with `trainer.save_checkpoint` in `on_train_start`
(`monitor="train_loss"`, `save_last=True`, `filename="best"`); `save_hyperparameters()` of the
configuration dict; `self.register_buffer('svdd_c', None)` later assigned the centre, computed in
`on_fit_start` by calling the DataModule's `setup()` (which reseeds torch with
`torch.manual_seed(42)`) and iterating its shuffled `train_dataloader()`; `on_save_checkpoint`
/ `on_load_checkpoint` keeping the centre under `checkpoint['svdd_c']`; `training_step(self,
batch)` logging `loss.item()` (a Python float); validation scores gathered in lists and turned
into a torchmetrics binary `AUROC` in `on_validation_epoch_end`; test scores, labels and the
batch's string file ids gathered in `test_step`, then in `on_test_end` an AUROC written with
`self.logger.experiment.add_scalar("test_auroc", auroc)` and a pandas CSV; Adam with
`SequentialLR(LambdaLR warm-up, CosineAnnealingLR)` stepped per epoch; the fold split by
`torch.randperm` with a seeded generator and the shuffled validation loader.
Substituted: the MIMII recordings are 40 normal and 10 abnormal random 128-sample signals (the
abnormal ones with a tone added); the learnable scattering network is a small 1-D convolution
stack without biases; `split_idx` is stored (the repo's `MIMII_OneClass` reads it without
setting it); `num_workers=0` (1 in the repo); `max_epochs` 7 (100), with the 5 warm-up epochs;
`on_fit_end` keeps `trainer.callback_metrics` for the test to compare (test() starts a new dict).
"""

from __future__ import annotations

import copy
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR
from torch.utils.data import DataLoader, Dataset
from torchmetrics import AUROC

import trainer as pl
from trainer import loggers as pl_loggers
from callbacks import ModelCheckpoint


class BaseDataSet(Dataset):
    def __init__(self, normal: bool, label: int, count: int) -> None:
        g = torch.Generator().manual_seed(7 if normal else 8)
        self.samples = torch.randn(count, 1, 128, generator=g) * 0.5
        if not normal:
            self.samples = self.samples + torch.sin(torch.arange(128) / 3.0)
        self.label, self.normal = label, normal

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        kind = "normal" if self.normal else "abnormal"
        return {"sample": self.samples[index], "label": self.label, "file_id": f"{kind}_{index:03d}.wav"}


class MIMII_OneClass(pl.LightningDataModule):
    def __init__(self, split_idx=0, num_samples=None, batch_size=32, num_workers=1):
        super(MIMII_OneClass, self).__init__()
        self.split_idx = split_idx
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.n_samples = num_samples
        self.base_set = BaseDataSet(normal=True, label=0, count=40)
        self.test_negative = BaseDataSet(normal=False, label=1, count=10)

    def setup(self, stage=None):
        torch.manual_seed(42)
        generator = torch.Generator().manual_seed(42)
        num_folds = 5
        assert 0 <= self.split_idx < num_folds, "split_idx must be in [0, 4]"
        dataset_size = len(self.base_set)
        indices = torch.randperm(dataset_size, generator=generator).tolist()
        fold_size = dataset_size // num_folds
        fold_sizes = [fold_size] * num_folds
        for i in range(dataset_size % num_folds):
            fold_sizes[i] += 1
        start = sum(fold_sizes[:self.split_idx])
        end = start + fold_sizes[self.split_idx]
        test_indices = indices[start:end]
        train_indices = indices[:start] + indices[end:]
        self.train_positive = torch.utils.data.Subset(self.base_set, train_indices)
        self.test_positive = torch.utils.data.Subset(self.base_set, test_indices)
        if self.n_samples is not None:
            num_samples = min(self.n_samples, len(self.train_positive))
            sample_indices = torch.randperm(len(self.train_positive), generator=generator)[:num_samples]
            self.train_positive = torch.utils.data.Subset(self.train_positive, sample_indices)
        self.test_set = torch.utils.data.ConcatDataset([self.test_positive, self.test_negative])

    def train_dataloader(self):
        return DataLoader(self.train_positive, batch_size=self.batch_size, num_workers=self.num_workers, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size, num_workers=self.num_workers, shuffle=True)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size, num_workers=self.num_workers, shuffle=False)


class Checkpoint(ModelCheckpoint):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def on_train_start(self, trainer, pl_module):
        save_path = os.path.join(self.dirpath, "initial.ckpt")
        trainer.save_checkpoint(save_path)


class BaseExperiment(ABC, torch.nn.Module):
    def __init__(self, configuration_dict):
        super(BaseExperiment, self).__init__()
        self.configuration_dict = copy.deepcopy(configuration_dict)
        model_sav_path = self.configuration_dict['model_save_path']
        os.makedirs(model_sav_path, exist_ok=True)
        self.dataset = MIMII_OneClass(**self.configuration_dict['dataset_settings']['kwargs'])
        checkpoint_cb = Checkpoint(dirpath=model_sav_path, monitor="train_loss", save_last=True, filename="best",
                                   save_weights_only=False)
        tb_logger = pl_loggers.TensorBoardLogger(save_dir=model_sav_path)
        self.max_epochs = self.configuration_dict['max_epochs']
        self.trainer = pl.Trainer(max_epochs=self.max_epochs, limit_val_batches=1.0, limit_test_batches=1.0,
                                  callbacks=[checkpoint_cb], logger=tb_logger, log_every_n_steps=1,
                                  enable_progress_bar=False, enable_model_summary=False)

    @abstractmethod
    def forward(self, *args, **kwargs):
        raise NotImplementedError()

    @abstractmethod
    def training_step(self, *args, **kwargs):
        raise NotImplementedError()

    def run(self):
        self.trainer.fit(self, self.dataset)
        self.trainer.test(self, self.dataset)


class Network(torch.nn.Module):
    def __init__(self, channels: int = 6) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv1d(1, channels, 9, stride=4, bias=False)
        self.conv2 = torch.nn.Conv1d(channels, channels, 5, stride=2, bias=False)
        self.proj = torch.nn.Linear(channels, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.leaky_relu(self.conv1(x))
        h = torch.nn.functional.leaky_relu(self.conv2(h))
        return self.proj(h.abs().mean(dim=-1))


class MurennExperiment(BaseExperiment, pl.LightningModule):
    def __init__(self, configuration_dict):
        super().__init__(configuration_dict)
        self.save_hyperparameters()
        self.network = Network()
        self.val_outputs = {'score': [], 'label': []}
        self.auroc = AUROC(task="binary")
        self.test_auroc = AUROC(task="binary")
        self.register_buffer('svdd_c', None)
        self.seen = []

    def svdd_c_init(self):
        self.dataset.setup()
        device = self.device
        dataloadr = self.dataset.train_dataloader()
        with torch.no_grad():
            scores = []
            for i, batch in enumerate(dataloadr):
                x = batch["sample"].to(device)
                outputs = self.network(x)
                scores.append(outputs)
            scores = torch.cat(scores, dim=0)
        c = torch.mean(scores, dim=0, keepdim=True)
        self.svdd_c = c

    def on_load_checkpoint(self, checkpoint):
        self.svdd_c = checkpoint['svdd_c']

    def on_save_checkpoint(self, checkpoint):
        checkpoint['svdd_c'] = self.svdd_c
        self.seen.append(("saved", None if self.svdd_c is None else self.svdd_c.clone()))

    def forward(self, batch):
        pred = self.network(batch['sample'])
        batch['scores'] = pred
        return batch

    def svdd_loss(self, x):
        if self.svdd_c is None:
            raise ValueError("SVDD hypersphere center not set.")
        dist = torch.sum((x - self.svdd_c) ** 2, dim=1)
        loss = torch.mean(dist)
        return loss

    def on_fit_start(self):
        if self.svdd_c is None:
            self.svdd_c_init()

    def on_fit_end(self):
        self.fit_metrics = {key: float(value) for key, value in self.trainer.callback_metrics.items()}

    def training_step(self, batch):
        batch = self(batch)
        loss = self.svdd_loss(batch['scores'])
        self.log('train_loss', loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        batch = self(batch)
        dist = torch.sum((batch['scores'] - self.svdd_c) ** 2, dim=1)
        self.val_outputs['score'].append(dist.view(-1, 1).detach())
        self.val_outputs['label'].append(batch['label'].view(-1, 1).detach())

    def on_validation_epoch_end(self):
        scores = torch.cat(self.val_outputs['score'], dim=0)
        labels = torch.cat(self.val_outputs['label'], dim=0)
        auroc = self.auroc(scores, labels)
        self.auroc.reset()
        self.log('val_auroc', auroc)
        self.val_outputs['score'].clear()
        self.val_outputs['label'].clear()

    def on_test_start(self):
        if self.svdd_c is None:
            self.svdd_c_init()
        self.file_names = []
        self.scores = []
        self.label = []

    def test_step(self, batch, batch_idx):
        batch = self(batch)
        dist = torch.sum((batch['scores'] - self.svdd_c) ** 2, dim=1)
        self.file_names.extend(batch['file_id'])
        self.scores.extend(dist.detach().cpu().numpy())
        self.label.extend(batch['label'].detach().cpu().numpy())

    def on_test_end(self):
        auroc = self.test_auroc(torch.Tensor(self.scores), torch.Tensor(self.label))
        self.logger.experiment.add_scalar("test_auroc", auroc)
        self.seen.append(("test_auroc", float(auroc)))
        self.test_auroc.reset()
        df = pd.DataFrame({'file': self.file_names, 'score': self.scores, 'label': self.label})
        csv_path = os.path.join(self.configuration_dict['model_save_path'], 'evaluate.csv')
        df.to_csv(csv_path)
        self.flag = 0

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.network.parameters(), **self.configuration_dict['optimizer']['kwargs'])
        self.warmup_epochs = 5

        def warmup_scheduler(epoch):
            if epoch < self.warmup_epochs:
                return epoch / self.warmup_epochs
            return 1.0

        warmup_scheduler = LambdaLR(optimizer, lr_lambda=warmup_scheduler)
        cosine_scheduler = CosineAnnealingLR(optimizer, T_max=self.max_epochs - self.warmup_epochs)
        scheduler = {
            'scheduler': torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers=[warmup_scheduler, cosine_scheduler],
                                                               milestones=[self.warmup_epochs]),
            'interval': 'epoch',
            'frequency': 1,
        }
        return [optimizer], [scheduler]


def main(root_dir: str | Path, max_epochs: int = 7) -> dict[str, Any]:
    pl.seed_everything(3)
    save_folder = str(Path(root_dir) / "save")
    config = {
        "model_save_path": save_folder,
        "max_epochs": max_epochs,
        "dataset_settings": {"class_name": "MIMII_OneClass",
                             "kwargs": {"num_samples": None, "batch_size": 8, "num_workers": 0, "split_idx": 1}},
        "optimizer": {"class": "torch.optim.Adam", "kwargs": {"lr": 1e-2, "betas": (0.9, 0.999), "amsgrad": False,
                                                              "weight_decay": 0}},
    }
    experiment = MurennExperiment(config)
    experiment.run()
    trainer = experiment.trainer
    fit_files = sorted(p.name for p in Path(save_folder).glob("*.ckpt"))
    reloaded = MurennExperiment.load_from_checkpoint(str(Path(save_folder) / "best.ckpt"), weights_only=False)
    return {"model": experiment, "trainer": trainer, "val": experiment.fit_metrics, "seen": experiment.seen,
            "files": fit_files, "csv": (Path(save_folder) / "evaluate.csv").read_text(),
            "best_score": float(trainer.checkpoint_callback.best_model_score),
            "lr": trainer.optimizers[0].param_groups[0]["lr"], "reloaded_c": reloaded.svdd_c}
