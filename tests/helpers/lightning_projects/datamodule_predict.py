"""A LightningDataModule with `prepare_data`/`setup`/`teardown` that writes and reads its data
files, `reload_dataloaders_every_n_epochs=1` (each epoch's loader is made again, with a batch
size that grows), `limit_train_batches=0.5`, `check_val_every_n_epoch=2`,
`num_sanity_val_steps=2`, then a `predict` run with a `BasePredictionWriter`; and
`LightningDataModule.from_datasets` for the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import BasePredictionWriter


class RegressionFiles(L.LightningDataModule):
    def __init__(self, data_dir: str, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.calls: list[str] = []

    def prepare_data(self) -> None:
        path = Path(self.hparams.data_dir) / "data.pt"
        self.calls.append("prepare_data")
        if not path.exists():
            g = torch.Generator().manual_seed(2)
            x = torch.randn(120, 5, generator=g)
            y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0]]) + 0.1 * torch.randn(120, 1, generator=g)
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"x": x, "y": y}, path)

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{stage}")
        data = torch.load(Path(self.hparams.data_dir) / "data.pt", weights_only=True)
        self.train_set = TensorDataset(data["x"][:80], data["y"][:80])
        self.val_set = TensorDataset(data["x"][80:100], data["y"][80:100])
        self.predict_set = TensorDataset(data["x"][100:])

    def train_dataloader(self) -> DataLoader:
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        self.calls.append(f"train_dataloader:{epoch}")
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size + 2 * epoch, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        self.calls.append("val_dataloader")
        return DataLoader(self.val_set, batch_size=6)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.predict_set, batch_size=7)

    def teardown(self, stage: str) -> None:
        self.calls.append(f"teardown:{stage}")


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_mse", loss, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_mse", F.mse_loss(self(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_mse", F.mse_loss(self(x), y))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class CollectingWriter(BasePredictionWriter):
    def __init__(self, output_dir: str) -> None:
        super().__init__(write_interval="batch_and_epoch")
        self.output_dir = output_dir
        self.batches: list[tuple[int, list[int], torch.Tensor]] = []

    def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                           batch_idx: int, dataloader_idx: int) -> None:
        self.batches.append((batch_idx, list(batch_indices), prediction.detach().clone()))

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        torch.save({"predictions": torch.cat(predictions[0] if isinstance(predictions[0], list) else predictions),
                    "indices": batch_indices}, Path(self.output_dir) / "predictions.pt")


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4, **overrides: Any) -> dict[str, Any]:
    """`overrides`: Trainer arguments replacing the project's."""
    L.seed_everything(29)
    root = Path(root_dir)
    data = RegressionFiles(str(root / "data"))
    model = Regressor()
    writer = CollectingWriter(str(root))
    arguments: dict[str, Any] = dict(
        reload_dataloaders_every_n_epochs=1,
        limit_train_batches=0.5,
        check_val_every_n_epoch=2,
        num_sanity_val_steps=2,
    )
    arguments.update(overrides)
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=False,
        callbacks=[writer],
        enable_progress_bar=False,
        enable_model_summary=False,
        **arguments,
    )
    trainer.fit(model, datamodule=data)
    validated = dict(trainer.callback_metrics)
    predictions = trainer.predict(model, datamodule=data)
    loaded = torch.load(root / "predictions.pt", weights_only=True)
    test_set = TensorDataset(data.val_set.tensors[0], data.val_set.tensors[1])
    tested = trainer.test(model, datamodule=L.LightningDataModule.from_datasets(test_dataset=test_set, batch_size=5), verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "test": tested, "calls": data.calls,
            "predictions": predictions, "written": writer.batches, "loaded": loaded}
