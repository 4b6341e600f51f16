"""Resuming from an older ModelCheckpoint file, written at the epoch's last optimizer step
(`every_n_train_steps`), before that epoch's validation: the resumed run validates there, as
the file's position and random state require, but a tracker that already holds that point
(the run went on past it) is not given it twice. Each tracker then holds every validation
point once, as an uninterrupted run writes them, and the weights are the uninterrupted run's.
The real libraries, offline: TensorBoard's own reader, MLflow on SQLite in tmp_path.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import callbacks
from trainer import Module, Trainer
from trainer.loggers import CSVLogger, MLflowLogger, TensorBoardLogger

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

STEPS_PER_EPOCH, EPOCHS = 8, 3


class Line(Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.validations = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def on_validation_end(self) -> None:
        self.validations += not self.trainer.sanity_checking

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loaders() -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    data = TensorDataset(x, x.sum(1, keepdim=True).sin())
    # A shuffled validation loader draws its seed from torch's generator, so a validation run
    # twice would also move the training's random stream.
    return (DataLoader(data, batch_size=4, shuffle=True), DataLoader(data, batch_size=8, shuffle=True))


def fit(root: Path, ckpt_path: str | None = None) -> tuple[Trainer, Line]:
    torch.manual_seed(0)
    model = Line()
    keep = callbacks.ModelCheckpoint(every_n_train_steps=4, save_top_k=-1)
    loggers = [TensorBoardLogger(root), CSVLogger(root), MLflowLogger("points", tracking_uri=f"sqlite:///{root / 'mlflow.db'}")]
    trainer = Trainer(root_dir=root, max_epochs=EPOCHS, log_every_n_steps=1, enable_progress_bar=False,
                      logger=loggers, callbacks=[keep], device="cpu")
    trainer.fit(model, *loaders(), ckpt_path=ckpt_path)
    return trainer, model


def tensorboard_points(folder: Path, tag: str) -> list[int]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


def csv_points(path: Path, tag: str) -> list[int]:
    with open(path, newline="") as handle:
        return [int(row["step"]) for row in csv.DictReader(handle) if row.get(tag)]


def mlflow_points(root: Path, tag: str) -> list[int]:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("points").experiment_id])
    return sorted(m.step for m in client.get_metric_history(run.info.run_id, tag))


@pytest.fixture(autouse=True)
def _no_tracking_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_resuming_from_a_file_written_at_validation_end_writes_each_validation_point_once(tmp_path: Path) -> None:
    full, full_model = fit(tmp_path / "full")
    folder = full.log_dir
    validation_steps = [STEPS_PER_EPOCH * (e + 1) for e in range(EPOCHS)]
    assert tensorboard_points(folder, "val/loss") == validation_steps and full_model.validations == EPOCHS

    older = next((folder / "checkpoints").glob(f"epoch=0-step={STEPS_PER_EPOCH}.ckpt"))
    resumed, model = fit(tmp_path / "full", ckpt_path=str(older))
    assert resumed.log_dir == folder and resumed.global_step == STEPS_PER_EPOCH * EPOCHS
    assert torch.load(older, weights_only=True)["loop"]["epoch_end_validated"] is False
    assert model.validations == EPOCHS  # the file was cut before step 8's validation: it runs again
    assert tensorboard_points(folder, "val/loss") == validation_steps  # not 8, 8, 16, 24
    assert csv_points(folder / "metrics.csv", "val/loss") == validation_steps
    # MLflow keeps every value logged after a checkpoint (the latest per step is the resumed run's,
    # docs/logging.md); the point at the step the run resumed at is not logged again.
    points = mlflow_points(tmp_path / "full", "val/loss")
    assert sorted(set(points)) == validation_steps and points.count(STEPS_PER_EPOCH) == 1
    for name, value in full_model.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
