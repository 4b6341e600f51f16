"""A SaveConfigCallback subclass that logs the resolved config to the run's logger.

The forms come from Lightning's docs (docs/source-pytorch/cli/lightning_cli_advanced.rst:
`LoggerSaveConfigCallback.save_config` logs `self.parser.dump(self.config, skip_none=False)`
with `trainer.logger.log_hyperparams`) and a graph intrusion-detection project's GraphIDSCLI
(a `save_config` override that updates its logger's run config with `self.config.as_dict()`,
passed as `save_config_callback=`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningModule
from trainer.cli import LightningCLI, SaveConfigCallback


class Tiny(LightningModule):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(3, width)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss = F.mse_loss(self.net(x), torch.zeros(x.shape[0], self.hparams.width))
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(4)
        return DataLoader(TensorDataset(torch.randn(16, 3, generator=g)), batch_size=4, shuffle=True)


class LoggerSaveConfigCallback(SaveConfigCallback):
    calls: list[str] = []

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        config = self.parser.dump(self.config, skip_none=False)
        trainer.logger.log_hyperparams({"config": config, "width": self.config.as_dict()[stage]["model"]["width"]
                                        if stage in self.config.as_dict() else self.config.model.width})
        type(self).calls.append(stage)


def main(argv: list[str]) -> LightningCLI:
    return LightningCLI(Tiny, args=argv, save_config_callback=LoggerSaveConfigCallback,
                        save_config_kwargs={"overwrite": True})
