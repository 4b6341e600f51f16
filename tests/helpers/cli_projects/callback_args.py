"""Callbacks configured under their own keys, a script option linked into the model, hooks.

The forms come from public LightningCLI projects:
- amarthur/spiders-machine-learning (src/sp_cli.py): `add_lightning_class_args(EarlyStopping,
  "early_stopping")` and `add_lightning_class_args(ModelCheckpoint, "model_checkpoint")`;
- a classification project's main.py: `set_defaults({"model_checkpoint.monitor": ...,
  "model_checkpoint.mode": ..., ...})` for the class-args callback;
- a CustomLightningCLI: `add_argument("--num_classes")` linked to the model with
  `link_arguments("num_classes", "model.init_args.num_classes", apply_on="parse")`;
- a LitCLI whose `before_instantiate_classes` reads `self.config[self.subcommand]`, and
  zdebruine/MMVAE's `before_fit` (Lightning's own tests: `before_fit`/`after_fit` order);
- Lightning's docs (cli/lightning_cli_expert.rst): `link_arguments` with a `compute_fn`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from callbacks import EarlyStopping, ModelCheckpoint
from trainer import LightningDataModule, LightningModule
from trainer.cli import LightningCLI


class Regressor(LightningModule):
    def __init__(self, num_classes: int = 2, width: int = 8, steps_hint: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.Tanh(), torch.nn.Linear(width, num_classes))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.05)


class Points(LightningDataModule):
    def __init__(self, batch_size: int = 8, classes: int = 2) -> None:
        super().__init__()
        self.batch_size, self.classes = batch_size, classes

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(1)
        x = torch.randn(40, 3, generator=g)
        self.train_set = TensorDataset(x[:32], (x[:32, 0] * 2).long().clamp(0, self.classes - 1))
        self.val_set = TensorDataset(x[32:], (x[32:, 0] * 2).long().clamp(0, self.classes - 1))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class CallbackCLI(LightningCLI):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.called: list[str] = []
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.add_lightning_class_args(ModelCheckpoint, "model_checkpoint")
        parser.set_defaults({
            "early_stopping.monitor": "val_loss",
            "early_stopping.patience": 2,
            "model_checkpoint.monitor": "val_loss",
            "model_checkpoint.mode": "min",
            "model_checkpoint.filename": "best-{epoch}",
        })
        parser.add_argument("--num_classes", type=int, default=3)
        parser.link_arguments("num_classes", "model.num_classes", apply_on="parse")
        parser.link_arguments("num_classes", "data.classes", apply_on="parse")
        parser.link_arguments(("data.batch_size", "trainer.max_epochs"), "model.steps_hint",
                              compute_fn=lambda batch_size, epochs: (32 // batch_size) * epochs)

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        self.called.append(f"before_instantiate_classes:{config['model']['init_args']['width'] if 'init_args' in config['model'] else config['model']['width']}")

    def after_instantiate_classes(self) -> None:
        self.called.append("after_instantiate_classes")

    def before_fit(self) -> None:
        self.called.append(f"before_fit:{self.trainer.global_step}")

    def after_fit(self) -> None:
        self.called.append(f"after_fit:{self.trainer.global_step}")


def main(argv: list[str], run: bool = True) -> CallbackCLI:
    cli = CallbackCLI(Regressor, Points, args=argv, run=run, save_config_kwargs={"overwrite": True})
    if not run:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli
