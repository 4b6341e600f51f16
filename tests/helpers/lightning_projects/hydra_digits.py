"""A digit classifier in the layout of the Lightning-Hydra template's MNIST run: the network is
built outside and passed in (`net`, ignored by `save_hyperparameters(logger=False, ...)`), the
optimizer and scheduler settings as plain values (a checkpoint holding `functools.partial`
objects is refused by `torch.load(weights_only=True)` in Lightning 2.6 too),
a torchmetrics-free running mean/accuracy/max, metrics named `train/loss`, `val/acc` and
`val/acc_best` logged as epoch values, `ReduceLROnPlateau` on `val/loss`, ModelCheckpoint and
EarlyStopping on `val/acc`, a LearningRateMonitor whose `lrs` a later callback reads at
`on_train_start`, a CSV logger, and the template's `train_metrics = trainer.callback_metrics`
kept across `trainer.test(ckpt_path="best")` (and a `validate` after it) to build the search
objective. The data module gives a map-style training set, or an IterableDataset without
`len()` (`stream=True`), each with `limit_train_batches`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset

import trainer as L
from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from trainer.loggers import CSVLogger


class RunningMean:
    """What `torchmetrics.MeanMetric` does for one process: a weighted running mean."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, value: torch.Tensor, weight: int = 1) -> None:
        self.total += float(value) * weight
        self.count += weight

    def compute(self) -> torch.Tensor:
        return torch.tensor(self.total / max(self.count, 1))

    def reset(self) -> None:
        self.total, self.count = 0.0, 0


class Digits(Dataset):
    """Noisy 6x6 glyphs of four classes; training images get a random shift in `__getitem__`."""

    def __init__(self, count: int, seed: int, augment: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 4, (count,), generator=g)
        glyphs = torch.zeros(4, 6, 6)
        glyphs[0, 1:5, 2], glyphs[1, 2, 1:5], glyphs[2, 1:5, 1:5] = 1.0, 1.0, 0.5
        glyphs[3].fill_diagonal_(1.0)
        self.data = glyphs[self.targets] + 0.4 * torch.randn(count, 6, 6, generator=g)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.data[index]
        if self.augment:
            image = torch.roll(image, int(torch.randint(-1, 2, ())), dims=-1)
        return image.unsqueeze(0), self.targets[index]


class DigitStream(IterableDataset):
    """The training set as a stream without `len()`: a fresh random order per pass."""

    def __init__(self, base: Digits) -> None:
        self.base = base

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in torch.randperm(len(self.base)).tolist():
            yield self.base[index]


class DigitsDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, stream: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.batch_size_per_device = batch_size

    def setup(self, stage: str | None = None) -> None:
        if not hasattr(self, "data_train"):
            self.data_train = Digits(96, seed=0, augment=True)
            self.data_val, self.data_test = Digits(32, seed=1, augment=False), Digits(32, seed=2, augment=False)

    def train_dataloader(self) -> DataLoader:
        if self.hparams.stream:
            return DataLoader(DigitStream(self.data_train), batch_size=self.batch_size_per_device)
        return DataLoader(self.data_train, batch_size=self.batch_size_per_device, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data_val, batch_size=self.batch_size_per_device)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.data_test, batch_size=self.batch_size_per_device)


class SimpleDenseNet(torch.nn.Module):
    def __init__(self, input_size: int = 36, lin1_size: int = 24, output_size: int = 4) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(input_size, lin1_size),
                                         torch.nn.BatchNorm1d(lin1_size), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                         torch.nn.Linear(lin1_size, output_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class DigitsLitModule(L.LightningModule):
    def __init__(self, net: torch.nn.Module, lr: float = 0.01, weight_decay: float = 0.0, factor: float | None = 0.5,
                 patience: int = 0, compile: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        self.train_loss, self.val_loss, self.test_loss = RunningMean(), RunningMean(), RunningMean()
        self.train_acc, self.val_acc, self.test_acc = RunningMean(), RunningMean(), RunningMean()
        self.val_acc_best = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def on_train_start(self) -> None:
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best = 0.0

    def model_step(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.forward(x)
        loss = F.cross_entropy(logits, y)
        return loss, logits.argmax(dim=1), y

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, preds, targets = self.model_step(batch)
        self.train_loss.update(loss.detach(), len(targets))
        self.train_acc.update((preds == targets).float().mean(), len(targets))
        self.log("train/loss", loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", (preds == targets).float().mean(), on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("train/epoch_acc", self.train_acc.compute())
        self.train_loss.reset()
        self.train_acc.reset()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.val_loss.update(loss, len(targets))
        self.val_acc.update((preds == targets).float().mean(), len(targets))
        self.log("val/loss", loss, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        acc = self.val_acc.compute()
        self.val_acc_best = max(self.val_acc_best, float(acc))
        self.log("val/acc", acc, prog_bar=True)
        self.log("val/acc_best", self.val_acc_best, sync_dist=True, prog_bar=True)
        self.val_loss.reset()
        self.val_acc.reset()

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.log("test/loss", loss, on_step=False, on_epoch=True)
        self.log("test/acc", (preds == targets).float().mean(), on_step=False, on_epoch=True)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.Adam(self.trainer.model.parameters(), lr=self.hparams.lr,
                                     weight_decay=self.hparams.weight_decay)
        if self.hparams.factor is not None:
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=self.hparams.factor,
                                                                   patience=self.hparams.patience)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss",
                                                             "interval": "epoch", "frequency": 1}}
        return {"optimizer": optimizer}


class LrsAtStart(L.Callback):
    """Reads the LearningRateMonitor's `lrs` when training starts, as a dashboard callback would."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self.at_start: dict[str, list[float]] | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.at_start = {k: list(v) for k, v in self.monitor.lrs.items()}


def main(root_dir: str | Path, precision: str = "32-true", stream: bool = False, limit: int | float = 10,
         max_epochs: int = 3) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(12345, workers=True)
    datamodule = DigitsDataModule(stream=stream)
    model = DigitsLitModule(net=SimpleDenseNet(), lr=0.01)
    checkpoint = ModelCheckpoint(dirpath=root_dir / "checkpoints", filename="epoch_{epoch:03d}", monitor="val/acc",
                                 mode="max", save_last=True, auto_insert_metric_name=False)
    early = EarlyStopping(monitor="val/acc", patience=3, mode="max")
    lr_monitor = LearningRateMonitor(logging_interval="epoch")
    at_start = LrsAtStart(lr_monitor)
    trainer = L.Trainer(default_root_dir=root_dir, min_epochs=1, max_epochs=max_epochs, precision=precision,
                        limit_train_batches=limit, callbacks=[checkpoint, early, lr_monitor, at_start],
                        logger=CSVLogger(save_dir=root_dir, name="csv", version=0), log_every_n_steps=4,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model=model, datamodule=datamodule)
    train_metrics = trainer.callback_metrics
    fitted = {k: float(v) for k, v in train_metrics.items()}
    trainer.test(model=model, datamodule=datamodule, ckpt_path=checkpoint.best_model_path, verbose=False)
    test_metrics = trainer.callback_metrics
    tested = {k: float(v) for k, v in test_metrics.items()}
    validated = trainer.validate(model=model, datamodule=datamodule, verbose=False)
    metric_dict = {**train_metrics, **test_metrics}
    return {"model": model, "trainer": trainer, "val": fitted, "test": tested,
            "validate": {k: float(v) for k, v in validated[0].items()},
            "objective": float(metric_dict["val/acc_best"]),
            "metric_dict": {k: float(v) for k, v in metric_dict.items()},
            "kept": {k: float(v) for k, v in train_metrics.items()},
            "hparams": sorted(model.hparams), "dm_hparams": dict(datamodule.hparams),
            "lrs_at_start": at_start.at_start, "lrs": lr_monitor.lrs,
            "best": Path(checkpoint.best_model_path).name, "best_score": float(checkpoint.best_model_score),
            "stopped_epoch": early.stopped_epoch, "files": sorted(p.name for p in (root_dir / "checkpoints").iterdir()),
            "csv": (root_dir / "csv" / "version_0" / "metrics.csv").read_text(), "after": torch.rand(4)}
