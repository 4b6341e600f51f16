"""Arguments linked between the data and the model, defaults and the script's own options.

The forms come from public LightningCLI projects:
- Lightning's own tests (tests/tests_pytorch/test_cli.py, `test_lightning_cli_link_arguments`):
  `link_arguments("data.batch_size", "model.batch_size")` and
  `link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")`, where the
  data module only knows `num_classes` once built;
- MohiniSingh02/EncoderOutcomePredictionDistilbert (src/classification_main.py): a data-aware
  model CLI whose number of classes comes from the built data module;
- a grammar-model project's LLMLightningCLI (`add_argument("--notes", type=str)`,
  `add_argument("--tags", nargs="*")`, parse links from the data to the model, `run=False` and
  `cli.trainer.fit(cli.model, datamodule=cli.datamodule)`);
- a classification project's `parser.set_defaults({...})` for model and trainer values.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningDataModule, LightningModule
from trainer.cli import LightningCLI


class Classifier(LightningModule):
    def __init__(self, num_classes: int, batch_size: int = 4, hidden: int = 8, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(hidden, num_classes))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class Blobs(LightningDataModule):
    def __init__(self, batch_size: int = 8, n: int = 48) -> None:
        super().__init__()
        self.batch_size, self.n = batch_size, n
        self.num_classes = 3  # known once the data is built, as a real dataset's label count

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.n, 4, generator=g)
        self.dataset = TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size)


class LinkedCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_argument("--notes", type=str, default=None, help="notes for the run")
        parser.add_argument("--tags", type=str, nargs="*", default=None, help="tags for the run")
        parser.link_arguments("data.batch_size", "model.batch_size")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.set_defaults({"model.hidden": 6, "trainer.max_epochs": 2})


def main(argv: list[str], run: bool = True) -> LinkedCLI:
    cli = LinkedCLI(Classifier, Blobs, args=argv, run=run, save_config_kwargs={"overwrite": True})
    if not run:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli
