"""The Lightning-Hydra template's MNIST run, from ashleve/Lightning-Hydra-template (GitHub)
(`src/models/mnist_module.py`, `src/models/components/simple_dense_net.py`,
`src/data/mnist_datamodule.py`, `src/train.py` and the `configs/` it reads).

Kept as written: `MNISTLitModule` with torchmetrics objects logged directly
(`self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)` for
`MeanMetric` and `Accuracy`), `MaxMetric` updated in `on_validation_epoch_end` and logged through
`.compute()` with `sync_dist=True`, the metrics reset in `on_train_start` (after the sanity
check), `save_hyperparameters(logger=False)` of `functools.partial` optimizer and scheduler
factories (Hydra's `_partial_: true`), `ReduceLROnPlateau` in a dict with `monitor`, `interval`
and `frequency`; `SimpleDenseNet` (Linear/BatchNorm1d/ReLU); the data module's `setup` that
splits with `random_split(generator=torch.Generator().manual_seed(42))` and divides the batch size
by `trainer.world_size`; the callbacks of `configs/callbacks/default.yaml`
(`ModelCheckpoint(filename="epoch_{epoch:03d}", monitor="val/acc", mode="max", save_last=True,
auto_insert_metric_name=False)`, `EarlyStopping(monitor="val/acc", patience=100, mode="max")`,
`ModelSummary(max_depth=-1)`), a CSV logger, and `train.py`'s order: `fit`, keep
`trainer.callback_metrics`, `test(ckpt_path=trainer.checkpoint_callback.best_model_path)`.
Substituted: MNIST is 120 random 28x28 images labelled by their brightest of the first ten pixels (torchvision is not installed
here), layer widths 16/32/16, three epochs, no RichProgressBar; the checkpoint's `partial`
hyperparameters need `weights_only=False` to be read back (Lightning 2.6 refuses them otherwise).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification.accuracy import Accuracy

from trainer import LightningDataModule, LightningModule, Trainer, seed_everything
from callbacks import EarlyStopping, ModelCheckpoint, ModelSummary
from trainer.loggers import CSVLogger


class SimpleDenseNet(nn.Module):
    def __init__(self, input_size: int = 784, lin1_size: int = 256, lin2_size: int = 256,
                 lin3_size: int = 256, output_size: int = 10) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(input_size, lin1_size), nn.BatchNorm1d(lin1_size), nn.ReLU(),
            nn.Linear(lin1_size, lin2_size), nn.BatchNorm1d(lin2_size), nn.ReLU(),
            nn.Linear(lin2_size, lin3_size), nn.BatchNorm1d(lin3_size), nn.ReLU(),
            nn.Linear(lin3_size, output_size),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, channels, width, height = x.size()
        x = x.view(batch_size, -1)
        return self.model(x)


class MNISTDataModule(LightningDataModule):
    def __init__(self, train_val_test_split: Tuple[int, int, int] = (80, 24, 16), batch_size: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.data_train: Optional[Dataset] = None
        self.data_val: Optional[Dataset] = None
        self.data_test: Optional[Dataset] = None
        self.batch_size_per_device = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def setup(self, stage: Optional[str] = None) -> None:
        if self.trainer is not None:
            if self.hparams.batch_size % self.trainer.world_size != 0:
                raise RuntimeError("Batch size is not divisible by the number of devices.")
            self.batch_size_per_device = self.hparams.batch_size // self.trainer.world_size
        if not self.data_train and not self.data_val and not self.data_test:
            g = torch.Generator().manual_seed(3)
            images = torch.rand(120, 1, 28, 28, generator=g)
            labels = images.view(120, -1)[:, :10].argmax(dim=1)
            dataset = TensorDataset(images, labels)
            self.data_train, self.data_val, self.data_test = random_split(
                dataset=dataset, lengths=self.hparams.train_val_test_split,
                generator=torch.Generator().manual_seed(42))

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_train, batch_size=self.batch_size_per_device, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_val, batch_size=self.batch_size_per_device, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data_test, batch_size=self.batch_size_per_device, shuffle=False)


class MNISTLitModule(LightningModule):
    def __init__(self, net: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.net = net
        self.criterion = torch.nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=10)
        self.val_acc = Accuracy(task="multiclass", num_classes=10)
        self.test_acc = Accuracy(task="multiclass", num_classes=10)
        self.train_loss = MeanMetric()
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def on_train_start(self) -> None:
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(self, batch: Tuple[torch.Tensor, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.forward(x)
        loss = self.criterion(logits, y)
        preds = torch.argmax(logits, dim=1)
        return loss, preds, y

    def training_step(self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def on_train_epoch_end(self) -> None:
        pass

    def validation_step(self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        acc = self.val_acc.compute()
        self.val_acc_best(acc)
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch: Tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.test_loss(loss)
        self.test_acc(preds, targets)
        self.log("test/loss", self.test_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_test_epoch_end(self) -> None:
        pass

    def configure_optimizers(self) -> Dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.parameters())
        if self.hparams.scheduler is not None:
            scheduler = self.hparams.scheduler(optimizer=optimizer)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss", "interval": "epoch", "frequency": 1},
            }
        return {"optimizer": optimizer}


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3, patience: int = 1) -> dict[str, Any]:
    seed_everything(12345, workers=True)
    datamodule = MNISTDataModule()
    net = SimpleDenseNet(input_size=784, lin1_size=16, lin2_size=32, lin3_size=16, output_size=10)
    model = MNISTLitModule(net=net, optimizer=partial(torch.optim.Adam, lr=0.01, weight_decay=0.0),
                           scheduler=partial(torch.optim.lr_scheduler.ReduceLROnPlateau, mode="min", factor=0.1, patience=patience))
    callbacks = [
        ModelCheckpoint(dirpath=str(Path(root_dir) / "checkpoints"), filename="epoch_{epoch:03d}", monitor="val/acc",
                        verbose=False, save_last=True, save_top_k=1, mode="max", auto_insert_metric_name=False,
                        save_weights_only=False, every_n_train_steps=None, train_time_interval=None, every_n_epochs=None,
                        save_on_train_epoch_end=None),
        EarlyStopping(monitor="val/acc", min_delta=0.0, patience=100, verbose=False, mode="max", strict=True,
                      check_finite=True, stopping_threshold=None, divergence_threshold=None, check_on_train_epoch_end=None),
        ModelSummary(max_depth=-1),
    ]
    trainer = Trainer(default_root_dir=str(root_dir), min_epochs=1, max_epochs=max_epochs, accelerator="cpu", devices=1,
                      check_val_every_n_epoch=1, deterministic=False, precision=precision, callbacks=callbacks,
                      logger=[CSVLogger(save_dir=str(root_dir), name="csv/", prefix="")], enable_progress_bar=False,
                      log_every_n_steps=2)
    trainer.fit(model=model, datamodule=datamodule, ckpt_path=None)
    train_metrics = {key: float(value) for key, value in trainer.callback_metrics.items()}
    fit_weights = {key: value.clone() for key, value in model.state_dict().items()}
    ckpt_path = trainer.checkpoint_callback.best_model_path
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    test = trainer.test(model=model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=False)
    return {"model": fit_weights, "trainer": trainer, "val": train_metrics, "test": test, "lr": lr,
            "best": Path(ckpt_path).name, "files": sorted(p.name for p in (Path(root_dir) / "checkpoints").iterdir()),
            "tested": {key: value.clone() for key, value in model.state_dict().items()}}
