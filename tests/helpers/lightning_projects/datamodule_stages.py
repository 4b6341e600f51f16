"""The MNIST-tutorial shape on random data: a `LightningDataModule` with
`save_hyperparameters()`, `setup(stage)` branching on `"fit"` / `"validate"` / `"test"` /
`"predict"` (a `random_split` with its own generator in the fit branch), a module reading
`self.hparams` in `__init__` and `configure_optimizers`, then `fit`, `validate`, `test` and
`predict` with `return_predictions=True`, each on the datamodule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

import trainer as L


class RandomDigits(L.LightningDataModule):
    def __init__(self, batch_size: int = 16, n: int = 200, features: int = 12) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.stages: list[str] = []

    def prepare_data(self) -> None:
        g = torch.Generator().manual_seed(123)
        x = torch.randn(self.hparams.n, self.hparams.features, generator=g)
        self._all = TensorDataset(x, (x[:, :5].sum(-1) * 2).long().clamp(-2, 2) + 2)

    def setup(self, stage: str) -> None:
        self.stages.append(str(stage))
        if stage == "fit":
            self.train_set, self.val_set, _ = random_split(self._all, [120, 40, 40], generator=torch.Generator().manual_seed(42))
        if stage == "validate":
            _, self.val_set, _ = random_split(self._all, [120, 40, 40], generator=torch.Generator().manual_seed(42))
        if stage == "test" or stage is None:
            _, _, self.test_set = random_split(self._all, [120, 40, 40], generator=torch.Generator().manual_seed(42))
        if stage == "predict":
            self.predict_set = TensorDataset(self._all.tensors[0][:24])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.predict_set, batch_size=10)


class DigitClassifier(L.LightningModule):
    def __init__(self, features: int = 12, hidden: int = 32, classes: int = 5, lr: float = 2e-3, dropout: float = 0.2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = torch.nn.Sequential(
            torch.nn.Linear(self.hparams.features, self.hparams.hidden), torch.nn.BatchNorm1d(self.hparams.hidden),
            torch.nn.ReLU(), torch.nn.Dropout(self.hparams.dropout), torch.nn.Linear(self.hparams.hidden, self.hparams.classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def _shared(self, batch: Any, prefix: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log(f"{prefix}_loss", loss, prog_bar=True)
        self.log(f"{prefix}_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._shared(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._shared(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        (x,) = batch
        return self(x).softmax(-1)

    def configure_optimizers(self) -> Any:
        return torch.optim.RMSprop(self.parameters(), lr=self.hparams.lr)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    L.seed_everything(99)
    data = RandomDigits(batch_size=16)
    model = DigitClassifier(features=data.hparams.features)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, deterministic=True)
    trainer.fit(model, datamodule=data)
    fitted = dict(trainer.callback_metrics)
    validated = trainer.validate(model, datamodule=data, verbose=False)[0]
    tested = trainer.test(model, datamodule=data, verbose=False)[0]
    predictions = trainer.predict(model, datamodule=data, return_predictions=True)
    return {"model": model, "trainer": trainer, "val": fitted, "validate": dict(validated), "test": dict(tested),
            "predictions": predictions, "stages": data.stages, "hparams": dict(model.hparams), "dm_hparams": dict(data.hparams)}
