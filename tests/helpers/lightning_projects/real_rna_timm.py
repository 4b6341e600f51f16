"""The 4th-place Stanford Ribonanza RNA folding solution's Lightning code, from
yu4u/kaggle-stanford-ribonanza-rna-folding-4th-place-solution (`rna/src/pl_module.py`: `MyModel`;
`rna/src/loss.py`: `MyLoss`; `rna/src/datamodule.py`: `MyDataModule`; `rna/02_train.py`;
`rna/src/config.yaml`).

Kept as written: `training_step` returning the loss dict (`loss` with its graph, the rest
detached) after `self.log_dict(loss_dict, on_epoch=True, sync_dist=True)`; an EMA copy of the
network updated in `on_train_batch_end` and used by `validation_step` (`val_` + each key);
`test_step` turning outputs into numpy (`np.clip`), collected from `on_test_start` and written
as a pandas CSV in `on_test_epoch_end`; a timm scheduler (not a `torch.optim.lr_scheduler`) in
`{"scheduler", "interval": "epoch", "frequency": 1}` stepped by the module's
`lr_scheduler_step(scheduler, metric)` as `scheduler.step(epoch=self.current_epoch)`; `MyLoss`
(masked L1 with the clip rules); the data module's `setup(stage=None)` that builds the test set
when `stage == "test"`, `drop_last=True` shuffled training; `02_train.py`'s
`seed_everything(42, workers=True)`, `Trainer(**dict(cfg.trainer), callbacks=...)` with the
config's `devices="auto"`, `strategy="auto"`, `sync_batchnorm=False`, `precision=32` (an int),
`gradient_clip_val=None`, `deterministic=True`, a `LearningRateMonitor()` and
`ModelCheckpoint(dirpath=None, monitor="val_loss", save_last=True, mode="min",
filename=finename + "_{epoch:03d}", save_weights_only=True, save_on_train_epoch_end=None)`,
then `fit(model, datamodule=dm)`.
Substituted (no timm, omegaconf or data here): `ModelEmaV2`, `create_optimizer_v2("AdamW")` and
`create_scheduler_v2("cosine")` are written out as the timm code computes them (a cosine from
`lr` to `min_lr` over `max_epochs`, set at each `step(epoch)`, with `state_dict`); the
OmegaConf config is a dict with attribute access; the transformer is one 16-wide pre-norm
encoder layer over an embedding of 4 nucleotides; 48 random sequences of 10 to 16 bases with
random reactivities (NaNs included, as the real labels have); the CSV goes to `root_dir`;
EMA is on and the logger is the Trainer's default (the script's W&B logger needs an account).
"""

from __future__ import annotations

import math
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from trainer import LightningDataModule, LightningModule, Trainer, seed_everything
from callbacks import LearningRateMonitor, ModelCheckpoint


class Cfg(dict):
    """OmegaConf's attribute access, for a plain nested dict."""

    def __getattr__(self, name: str) -> Any:
        value = self[name]
        return Cfg(value) if isinstance(value, dict) else value


class ModelEmaV2(nn.Module):
    def __init__(self, model, decay=0.9999, device=None):
        super().__init__()
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay
        self.device = device

    def _update(self, model, update_fn):
        with torch.no_grad():
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                ema_v.copy_(update_fn(ema_v, model_v))

    def update(self, model):
        self._update(model, update_fn=lambda e, m: self.decay * e + (1. - self.decay) * m)


class CosineLRScheduler:
    """timm's epoch-stepped cosine scheduler (no warmup, one cycle), as `create_scheduler_v2` makes it."""

    def __init__(self, optimizer, t_initial, lr_min=0.0):
        self.optimizer = optimizer
        self.t_initial, self.lr_min = t_initial, lr_min
        for group in self.optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_values = [group["initial_lr"] for group in self.optimizer.param_groups]

    def _get_lr(self, t):
        if t < self.t_initial:
            return [self.lr_min + 0.5 * (lr_max - self.lr_min) * (1 + math.cos(math.pi * t / self.t_initial))
                    for lr_max in self.base_values]
        return [self.lr_min for _ in self.base_values]

    def step(self, epoch, metric=None):
        for group, value in zip(self.optimizer.param_groups, self._get_lr(epoch)):
            group["lr"] = value

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


def create_optimizer_v2(model_or_params, opt, lr, weight_decay):
    decay, no_decay = [], []
    for name, param in model_or_params.named_parameters():
        (no_decay if param.ndim <= 1 or name.endswith(".bias") else decay).append(param)
    groups = [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]
    return getattr(torch.optim, opt)(groups, lr=lr)


def create_scheduler_v2(optimizer, num_epochs, sched, min_lr, warmup_epochs, warmup_lr):
    return CosineLRScheduler(optimizer, t_initial=num_epochs, lr_min=min_lr), num_epochs


class RNAModel(nn.Module):
    def __init__(self, hidden_dim):
        super().__init__()
        self.embedding = nn.Embedding(4, hidden_dim)
        self.encoder = nn.TransformerEncoderLayer(hidden_dim, 2, 2 * hidden_dim, dropout=0.1, batch_first=True, norm_first=True)
        self.head = nn.Linear(hidden_dim, 2)

    def forward(self, x):
        h = self.encoder(self.embedding(x["seq"]), src_key_padding_mask=~x["mask"])
        return self.head(h)


class MyLoss(nn.Module):
    def __init__(self, cfg):
        super(MyLoss, self).__init__()
        self.cfg = cfg
        self.l1_loss = nn.L1Loss(reduction="none")
        self.l2_loss = nn.MSELoss()

    def forward(self, y_pred, y_true, val=False):
        return_dict = dict()
        p = y_pred[y_true['mask'][:, :y_pred.shape[1]]]
        y = y_true['react'][y_true['mask']]
        if val:
            p = p.clip(0, 1)
            y = y.clip(0, 1)
        l1_loss = self.l1_loss(p, y)
        if not val:
            mask = ((p <= 0) & (y <= 0)) | ((p >= 1) & (y >= 1))
            l1_loss[mask] = 0
        l1_loss = l1_loss[~torch.isnan(l1_loss)]
        l1_loss = l1_loss.mean()
        return_dict["loss"] = l1_loss
        return return_dict


class MyModel(LightningModule):
    def __init__(self, cfg, mode="train"):
        super().__init__()
        self.seq_lengths = None
        self.reacts = None
        self.cfg = cfg
        self.model = RNAModel(cfg.model.hidden_dim)
        if mode != "test" and cfg.model.ema:
            self.model_ema = ModelEmaV2(self.model, decay=0.99)
        self.loss = MyLoss(cfg)
        self.lrs = []

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        output = self.model(x)
        loss_dict = {k: v if k == "loss" else v.detach() for k, v in self.loss(output, y).items()}
        self.log_dict(loss_dict, on_epoch=True, sync_dist=True)
        return loss_dict

    def on_train_batch_end(self, out, batch, batch_idx):
        if self.cfg.model.ema:
            self.model_ema.update(self.model)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        if self.cfg.model.ema:
            output = self.model_ema.module(x)
        else:
            output = self.model(x)
        loss_dict = self.loss(output, y, val=True)
        log_dict = {"val_" + k: v for k, v in loss_dict.items()}
        self.log_dict(log_dict, on_epoch=True, sync_dist=True)

    def on_test_start(self):
        self.reacts = []
        self.seq_lengths = []

    def test_step(self, batch, batch_idx):
        x = batch
        output = self.model(x)
        output = np.clip(output.float().cpu().numpy(), 0.0, 1.0)
        seq_lengths = x["mask"].sum(1).cpu().numpy()
        output = np.pad(output, ((0, 0), (0, 16 - output.shape[1]), (0, 0)))
        self.reacts.append(output)
        self.seq_lengths.append(seq_lengths)

    def on_test_epoch_end(self):
        reacts = np.concatenate(self.reacts, 0)
        seq_lengths = np.concatenate(self.seq_lengths, 0)
        preds_processed = []
        for i, react in enumerate(reacts):
            preds_processed.append(react[:seq_lengths[i]])
        concat_preds = np.concatenate(preds_processed)
        submission = pd.DataFrame({
            "id": np.arange(0, len(concat_preds), 1),
            "reactivity_DMS_MaP": concat_preds[:, 1],
            "reactivity_2A3_MaP": concat_preds[:, 0]
        })
        filename = Path(self.cfg.model.resume_path).stem
        submission.to_csv(Path(self.cfg.out_dir) / f"{filename}.csv", index=False)

    def configure_optimizers(self):
        optimizer = create_optimizer_v2(model_or_params=self.model, **self.cfg.opt)
        scheduler, num_epochs = create_scheduler_v2(optimizer=optimizer, num_epochs=self.cfg.trainer.max_epochs,
                                                    warmup_lr=self.cfg.opt.lr / 10.0, **self.cfg.scheduler)
        lr_dict = dict(scheduler=scheduler, interval="epoch", frequency=1)
        return dict(optimizer=optimizer, lr_scheduler=lr_dict)

    def lr_scheduler_step(self, scheduler, metric):
        scheduler.step(epoch=self.current_epoch)
        self.lrs.append((self.current_epoch, [group["lr"] for group in scheduler.optimizer.param_groups]))


class MyDataset(Dataset):
    def __init__(self, cfg, split):
        g = torch.Generator().manual_seed({"train": 0, "val": 1, "test": 2}[split])
        self.split, self.items = split, []
        for _ in range({"train": 48, "val": 16, "test": 12}[split]):
            length = int(torch.randint(10, 17, (1,), generator=g))
            seq = torch.zeros(16, dtype=torch.long)
            seq[:length] = torch.randint(0, 4, (length,), generator=g)
            mask = torch.zeros(16, dtype=torch.bool)
            mask[:length] = True
            react = torch.rand(16, 2, generator=g) * 1.4 - 0.2
            react[torch.rand(16, generator=g) < 0.1] = float("nan")
            self.items.append(({"seq": seq, "mask": mask}, {"react": react, "mask": mask}))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        x, y = self.items[index]
        return x if self.split == "test" else (x, y)


class MyDataModule(LightningDataModule):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.train_dataset = None
        self.val_dataset = None
        self.test_dataset = None

    def prepare_data(self):
        pass

    def setup(self, stage=None):
        self.train_dataset = MyDataset(self.cfg, "train")
        self.val_dataset = MyDataset(self.cfg, "val")
        if stage == "test":
            self.test_dataset = MyDataset(self.cfg, "test")

    def train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.cfg.data.batch_size, collate_fn=None,
                          shuffle=True, drop_last=True, num_workers=self.cfg.data.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=self.cfg.data.batch_size, collate_fn=None,
                          shuffle=False, drop_last=False, num_workers=self.cfg.data.num_workers)

    def test_dataloader(self):
        return DataLoader(self.test_dataset, batch_size=self.cfg.data.batch_size, collate_fn=None,
                          shuffle=False, drop_last=False, num_workers=self.cfg.data.num_workers)


def main(root_dir: str | Path, precision: Any = 32, max_epochs: int = 4) -> dict[str, Any]:
    cfg = Cfg(
        task={"mode": "train", "pseudo": False, "oof": False},
        model={"arch": "transformer", "resume_path": "saved/transformer__fold_0.ckpt", "hidden_dim": 16, "ema": True},
        data={"fold_id": 0, "num_workers": 0, "batch_size": 10, "train_all": False},
        trainer={"max_epochs": max_epochs, "devices": "auto", "strategy": "auto", "check_val_every_n_epoch": 1,
                 "sync_batchnorm": False, "accelerator": "cpu", "precision": precision, "gradient_clip_val": None,
                 "accumulate_grad_batches": 1, "deterministic": True},
        opt={"opt": "AdamW", "lr": 2e-3, "weight_decay": 0.05},
        scheduler={"sched": "cosine", "min_lr": 2e-4, "warmup_epochs": 0},
        out_dir=str(root_dir),
    )
    seed_everything(42, workers=True)
    model = MyModel(cfg, mode="train")
    dm = MyDataModule(cfg)
    train_args = dict(cfg.trainer)
    lr_monitor = LearningRateMonitor()
    finename = f"{cfg.model.arch}__fold_{cfg.data.fold_id}"
    save_on_train_epoch_end = True if cfg.data.train_all else None
    checkpoint_callback = ModelCheckpoint(dirpath=None, monitor="val_loss", save_last=True, mode="min",
                                          filename=finename + "_{epoch:03d}", save_weights_only=True,
                                          save_on_train_epoch_end=save_on_train_epoch_end)
    trainer = Trainer(**train_args, callbacks=[lr_monitor, checkpoint_callback], default_root_dir=str(root_dir),
                      enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=2)
    trainer.fit(model, datamodule=dm)
    fit_metrics = dict(trainer.callback_metrics)
    weights = {key: value.clone() for key, value in model.state_dict().items()}
    trainer.test(model, datamodule=dm, verbose=False)
    return {"model": weights, "trainer": trainer, "val": fit_metrics, "lrs": model.lrs, "monitor": lr_monitor.lrs,
            "best": Path(checkpoint_callback.best_model_path).name, "last": Path(checkpoint_callback.last_model_path).name,
            "files": sorted(p.name for p in Path(checkpoint_callback.dirpath).iterdir()),
            "csv": (Path(root_dir) / "transformer__fold_0.csv").read_text()}
