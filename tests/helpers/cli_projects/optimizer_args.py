"""The optimizer and scheduler a script fixes in `add_arguments_to_parser`.

The forms come from public LightningCLI projects:
- zdebruine/MMVAE (src/sciml/cli.py): `parser.add_optimizer_args(torch.optim.Adam)` and
  `parser.add_lr_scheduler_args(torch.optim.lr_scheduler.LinearLR)` in a LightningCLI subclass;
- Lightning's own tests (tests/tests_pytorch/test_cli.py,
  `test_lightning_cli_optimizer_and_lr_scheduler`: Adam and ExponentialLR, `--lr_scheduler.gamma=0.8`;
  `test_lightning_cli_optimizers_and_lr_scheduler_with_link_to`'s tuple form
  `add_optimizer_args((torch.optim.SGD, torch.optim.Adam))`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningModule
from trainer.cli import LightningCLI


class Net(LightningModule):
    def __init__(self, width: int = 6) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(2)
        x = torch.randn(24, 4, generator=g)
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=6, shuffle=True)


class FixedCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_optimizer_args(torch.optim.Adam)
        parser.add_lr_scheduler_args(torch.optim.lr_scheduler.ExponentialLR)


class ChoiceCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_optimizer_args((torch.optim.SGD, torch.optim.Adam))


def main(argv: list[str], run: bool = True, choice: bool = False) -> LightningCLI:
    return (ChoiceCLI if choice else FixedCLI)(Net, args=argv, run=run, save_config_callback=None)
