"""Several evaluation loaders, recorded hook by hook: a regressor validated on the list of two
loaders its `val_dataloader()` returns, every second epoch (`check_val_every_n_epoch=2`, a sanity check, `limit_val_batches`,
a metric logged in `on_validation_epoch_end`, `ModelCheckpoint(monitor="val_loss/dataloader_idx_0")`),
tested on a DataModule's dict of three loaders, and predicting from two loaders with a
`BasePredictionWriter` (loaders passed to `predict`). A callback and the module record every evaluation hook with the
arguments it received (a batch by its first value), so the order and the `dataloader_idx`
passed (positionally, only with several loaders) can be compared with Lightning's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import BasePredictionWriter, ModelCheckpoint


def _shown(value: Any) -> Any:
    """A hook argument as recorded: a batch or output by its first number, others as they are."""
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    if isinstance(value, torch.Tensor):
        return round(float(value.flatten()[0]), 5)
    if isinstance(value, dict):
        return sorted(value)
    return value


class Recorder(L.Callback):
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls


def _recording(name: str) -> Any:
    def hook(self: Recorder, trainer: Any, module: Any, *args: Any) -> None:
        self.calls.append(("callback", name, *(_shown(a) for a in args)))

    return hook


for _hook in ("on_sanity_check_start", "on_sanity_check_end", *(f"on_{stage}_{when}" for stage in ("validation", "test", "predict")
              for when in ("start", "end", "epoch_start", "epoch_end", "batch_start", "batch_end"))):
    setattr(Recorder, _hook, _recording(_hook))


def make(n: int, seed: int, shift: float = 0.0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g) + shift
    return TensorDataset(x, x.sum(-1, keepdim=True).tanh() + 0.1 * torch.randn(n, 1, generator=g))


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.calls: list[Any] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.calls.append(("step", "validation", batch_idx, dataloader_idx))
        loss = F.mse_loss(self(x), y)
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_mae", F.l1_loss(self(x), y), on_step=True, on_epoch=True)
        self.log(f"val_max_{dataloader_idx}", loss, reduce_fx="max", add_dataloader_idx=False)

    def on_validation_epoch_end(self) -> None:
        self.log("val_epochs_seen", float(self.current_epoch))

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.calls.append(("module", "on_validation_batch_start", batch_idx, dataloader_idx))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.calls.append(("step", "test", batch_idx, dataloader_idx))
        self.log("test_loss", F.mse_loss(self(x), y))

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.calls.append(("module", "on_test_batch_end", batch_idx, dataloader_idx))

    def on_test_epoch_end(self) -> None:
        self.log("test_done", 1.0)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        self.calls.append(("step", "predict", batch_idx, dataloader_idx))
        return self(batch[0])

    def val_dataloader(self) -> list[DataLoader]:  # the module's own loaders, Lightning's data hook
        return [DataLoader(make(16, 1), batch_size=4), DataLoader(make(8, 2, 0.5), batch_size=4)]

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.calls.append(("module", "on_before_batch_transfer", dataloader_idx))
        return batch

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class TestSets(L.LightningDataModule):
    def test_dataloader(self) -> dict[str, DataLoader]:
        return {"clean": DataLoader(make(12, 3), batch_size=4), "shifted": DataLoader(make(10, 4, 1.0), batch_size=4),
                "far": DataLoader(make(6, 5, 3.0), batch_size=3)}


class Writer(BasePredictionWriter):
    def __init__(self) -> None:
        super().__init__(write_interval="batch_and_epoch")
        self.batches: list[Any] = []
        self.epochs: list[Any] = []

    def write_on_batch_end(self, trainer: Any, pl_module: Any, prediction: Any, batch_indices: Any, batch: Any,
                           batch_idx: int, dataloader_idx: int) -> None:
        self.batches.append((list(batch_indices), batch_idx, dataloader_idx, _shown(prediction)))

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any) -> None:
        self.epochs.append(([[_shown(p) for p in each] for each in predictions], batch_indices))


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 4) -> dict[str, Any]:
    L.seed_everything(3)
    model = Regressor()
    calls: list[Any] = model.calls
    checkpoint = ModelCheckpoint(dirpath=Path(root_dir) / "ckpts", monitor="val_loss/dataloader_idx_0", save_top_k=1)
    trainer = L.Trainer(max_epochs=max_epochs, precision=precision, default_root_dir=root_dir, logger=False,
                        callbacks=[Recorder(calls), checkpoint], check_val_every_n_epoch=2, num_sanity_val_steps=2,
                        limit_val_batches=3, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(make(32, 0), batch_size=8, shuffle=True))
    fitted = {"val": dict(trainer.callback_metrics), "num_val_batches": list(trainer.num_val_batches),
              "best": Path(checkpoint.best_model_path).name, "score": float(checkpoint.best_model_score),
              "files": sorted(p.name for p in (Path(root_dir) / "ckpts").iterdir())}
    tested = trainer.test(model, datamodule=TestSets(), verbose=False)
    test_metrics = dict(trainer.callback_metrics)
    writer = Writer()
    predictor = L.Trainer(precision=precision, default_root_dir=root_dir, logger=False, callbacks=[Recorder(calls), writer],
                          enable_progress_bar=False, enable_model_summary=False, limit_predict_batches=2)
    predictions = predictor.predict(model, [DataLoader(make(12, 6), batch_size=4), DataLoader(make(5, 7), batch_size=2)])
    return {"model": model, "trainer": trainer, **fitted, "test": [dict(d) for d in tested], "test_metrics": test_metrics,
            "num_test_batches": list(trainer.num_test_batches), "predictions": predictions,
            "num_predict_batches": list(predictor.num_predict_batches), "writer": (writer.batches, writer.epochs),
            "calls": calls}
