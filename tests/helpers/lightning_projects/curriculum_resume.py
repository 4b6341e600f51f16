"""A curriculum kept in the DataModule's `state_dict`/`load_state_dict`: a callback moves the
DataModule to the next stage (larger batches, harder samples) at each epoch's end, with
`reload_dataloaders_every_n_epochs=1`; the run is stopped after 2 epochs and resumed from
`last.ckpt` with a fresh DataModule, which must build its loader from the restored stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import Callback, ModelCheckpoint


class Curriculum(L.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.level = 0
        self.calls: list[str] = []
        g = torch.Generator().manual_seed(3)
        x = torch.randn(96, 4, generator=g)
        self.noise = torch.randn(96, generator=g)
        self.x, self.y = x, x[:, 0] - x[:, 1]

    def train_dataloader(self) -> DataLoader:
        self.calls.append(f"train_dataloader@{self.level}")
        y = self.y + 0.2 * self.level * self.noise  # harder: noisier targets
        return DataLoader(TensorDataset(self.x, y), batch_size=8 * (self.level + 1), shuffle=False)

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.level}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.calls.append("load_state_dict")
        self.level = state_dict["level"]


class LevelUp(Callback):
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        trainer.datamodule.level = min(trainer.datamodule.level + 1, 3)


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x).squeeze(-1), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.5)


def make_trainer(root_dir: Path, precision: str, max_epochs: int) -> Any:
    return L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                     reload_dataloaders_every_n_epochs=1,
                     callbacks=[LevelUp(), ModelCheckpoint(dirpath=root_dir / "ckpts", save_last=True)],
                     enable_progress_bar=False, enable_model_summary=False)


def main(root_dir: str | Path, precision: str = "32-true", stop_at: int = 2, max_epochs: int = 4) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(9)
    make_trainer(root_dir, precision, stop_at).fit(Model(), datamodule=Curriculum())
    L.seed_everything(9)
    model, data = Model(), Curriculum()
    trainer = make_trainer(root_dir, precision, max_epochs)
    trainer.fit(model, datamodule=data, ckpt_path=str(root_dir / "ckpts" / "last.ckpt"))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "level": data.level,
            "first_call": data.calls[0]}
