"""A Hydra-style run in the shape of the widely used Hydra project template: the callbacks,
the logger and the Trainer come from a config that names each class by its dotted path
(`_target_`) and writes every argument out, the defaults included (what a dumped Hydra or
CLI config holds), and are built the way `hydra.utils.instantiate` builds them: import the
module of the path, take the class, call it with the other keys. The paths are made from the
imported packages' names, so this file moves by its import lines alone. The run: fit with a
top-2 ModelCheckpoint on `val/acc`, EarlyStopping, ReduceLROnPlateau, a CSVLogger named
"csv/", then `test` from the best checkpoint, keeping the fit's `callback_metrics` dict (the
template's `metric_dict`) and merging the test's into a copy."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

import callbacks
import trainer as L
from trainer import loggers

CALLBACKS, LOGGERS, TRAINER = callbacks.__name__, loggers.__name__, L.__name__


def config(root_dir: Path, precision: str) -> dict[str, Any]:
    """What `configs/train.yaml` and its callback/logger files resolve to."""
    return {
        "seed": 12345,
        "data": {"batch_size": 16, "train_val_test_split": [96, 32, 32]},
        "model": {"hidden": 32, "lr": 0.01, "weight_decay": 0.0},
        "callbacks": {
            "model_checkpoint": {
                "_target_": f"{CALLBACKS}.ModelCheckpoint",
                "dirpath": str(root_dir / "checkpoints"), "filename": "epoch_{epoch:03d}", "monitor": "val/acc",
                "verbose": False, "save_last": True, "save_top_k": 2, "save_on_exception": False, "mode": "max",
                "auto_insert_metric_name": False, "save_weights_only": False, "every_n_train_steps": None,
                "train_time_interval": None, "every_n_epochs": None, "save_on_train_epoch_end": None,
                "enable_version_counter": True,
            },
            "early_stopping": {
                "_target_": f"{CALLBACKS}.EarlyStopping",
                "monitor": "val/acc", "min_delta": 0.0, "patience": 3, "verbose": False, "mode": "max", "strict": True,
                "check_finite": True, "stopping_threshold": None, "divergence_threshold": None,
                "check_on_train_epoch_end": None, "log_rank_zero_only": False,
            },
            "model_summary": {"_target_": f"{CALLBACKS}.ModelSummary", "max_depth": 1},
            "learning_rate_monitor": {
                "_target_": f"{CALLBACKS}.LearningRateMonitor",
                "logging_interval": None, "log_momentum": False, "log_weight_decay": False,
            },
            "timer": {"_target_": f"{CALLBACKS}.Timer", "duration": None, "interval": "step", "verbose": True},
            "lambda": {"_target_": f"{CALLBACKS}.LambdaCallback", "setup": None, "teardown": None, "on_fit_start": None},
        },
        "logger": {
            "csv": {
                "_target_": f"{LOGGERS}.CSVLogger",
                "save_dir": str(root_dir), "name": "csv/", "version": None, "prefix": "",
                "flush_logs_every_n_steps": 100,
            },
        },
        "trainer": {
            "_target_": f"{TRAINER}.Trainer",
            "default_root_dir": str(root_dir), "min_epochs": 1, "max_epochs": 6, "accelerator": "cpu", "devices": 1,
            "check_val_every_n_epoch": 1, "deterministic": False, "precision": precision, "log_every_n_steps": 3,
            "enable_progress_bar": False,
        },
    }


def locate(path: str) -> Any:
    """Hydra's `_locate`: the longest importable module prefix of `path`, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(f"cannot locate {path!r}")


def instantiate(node: dict[str, Any], **extra: Any) -> Any:
    arguments = {key: value for key, value in node.items() if key != "_target_"}
    return locate(node["_target_"])(**arguments, **extra)


class MNISTLikeDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 16, train_val_test_split: tuple[int, int, int] = (96, 32, 32)) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)

    def setup(self, stage: str) -> None:
        if not hasattr(self, "data_train"):
            g = torch.Generator().manual_seed(42)
            x = torch.randn(sum(self.hparams.train_val_test_split), 1, 8, 8, generator=g)
            y = (x.mean(dim=(1, 2, 3)) * 4 + torch.randn(len(x), generator=g)).clamp(-1.99, 1.99).add(2).long()
            self.data_train, self.data_val, self.data_test = random_split(
                TensorDataset(x, y), self.hparams.train_val_test_split, generator=torch.Generator().manual_seed(42))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data_train, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data_val, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.data_test, batch_size=self.hparams.batch_size)


class MNISTLitModule(L.LightningModule):
    def __init__(self, hidden: int = 32, lr: float = 0.01, weight_decay: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4))
        self.val_acc_best = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def model_step(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(dim=1) == y).float().mean()

    def on_train_start(self) -> None:
        self.val_acc_best = 0.0  # the sanity check's value must not count

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, acc = self.model_step(batch)
        self.log("train/nll", loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self.model_step(batch)
        self.log("val/loss", loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        acc = self.trainer.callback_metrics["val/acc"]
        self.val_acc_best = max(self.val_acc_best, float(acc))
        self.log("val/acc_best", self.val_acc_best, sync_dist=True, prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        loss, acc = self.model_step(batch)
        self.log("test/loss", loss, on_step=False, on_epoch=True)
        self.log("test/acc", acc, on_step=False, on_epoch=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val/acc", "interval": "epoch"}}


def main(root_dir: Path, precision: str = "32-true") -> dict[str, Any]:
    cfg = config(Path(root_dir), precision)
    L.seed_everything(cfg["seed"], workers=True)
    datamodule = MNISTLikeDataModule(**cfg["data"])
    model = MNISTLitModule(**cfg["model"])
    callback_list = [instantiate(node) for node in cfg["callbacks"].values()]
    logger_list = [instantiate(node) for node in cfg["logger"].values()]
    trainer = instantiate(cfg["trainer"], callbacks=callback_list, logger=logger_list)
    trainer.fit(model=model, datamodule=datamodule)
    train_metrics = trainer.callback_metrics  # the template keeps this dict, then tests
    fit_values = {key: float(value) for key, value in train_metrics.items()}
    checkpoint = trainer.checkpoint_callback
    trained = {key: value.clone() for key, value in model.state_dict().items()}
    trainer.test(model=model, datamodule=datamodule, ckpt_path=checkpoint.best_model_path, verbose=False)
    test_metrics = trainer.callback_metrics
    metric_dict = {**train_metrics, **test_metrics}
    return {
        "model": model, "trainer": trainer, "trained": trained, "fit_values": fit_values,
        "kept": {key: float(value) for key, value in train_metrics.items()},
        "metric_dict": {key: float(value) for key, value in metric_dict.items()},
        "callbacks": callback_list, "checkpoint": checkpoint, "log_dir": Path(trainer.logger.log_dir),
        "files": sorted(path.name for path in (Path(root_dir) / "checkpoints").iterdir()),
    }
