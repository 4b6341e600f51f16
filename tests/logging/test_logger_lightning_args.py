"""The loggers take Lightning's constructor arguments, so `TensorBoardLogger("logs", name="m",
default_hp_metric=False, log_graph=True)` and friends run with only the imports changed.

Each test states Lightning's behaviour (its `loggers/tensorboard.py`, `csv_logs.py`,
`wandb.py`, `mlflow.py`) and checks ours through the library's own reader; where Lightning is
installed, a run under both is compared (folders, names, weights).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module, Trainer
from trainer.loggers import CSVLogger, MLflowLogger, TensorBoardLogger, WandbLogger

EventAccumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator


class Graphed(Module):
    """Dropout, so a graph traced in training mode would move torch's random stream."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
        self.example_input_array = torch.randn(2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(logger: Any, root: Path) -> Graphed:
    torch.manual_seed(0)
    model = Graphed()
    Trainer(max_epochs=1, logger=logger, root_dir=root, enable_progress_bar=False, log_every_n_steps=1,
            enable_checkpointing=False).fit(model, DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
    return model


def events(folder: Path) -> EventAccumulator:
    (found,) = [p.parent for p in folder.rglob("events.out.tfevents.*")]
    return EventAccumulator(str(found)).Reload()


def test_tensorboard_prefix_sub_dir_hp_metric_and_graph(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, name="tb", log_graph=True, default_hp_metric=True, prefix="run1",
                               sub_dir="events", max_queue=3)
    fit(logger, tmp_path)
    run = tmp_path / "tb" / "version_0"
    assert [p.name for p in (run / "events").glob("events.out.tfevents.*")]  # Lightning: log_dir/sub_dir
    accumulator = events(run)
    tags = accumulator.Tags()["scalars"]
    assert "run1-loss" in tags and "run1-train/loss" in tags and "loss" not in tags  # Lightning: prefix-name
    assert [e.value for e in accumulator.Scalars("run1-hp_metric")] == [-1.0]  # Lightning's placeholder
    assert accumulator.Graph() is not None  # traced on example_input_array


def test_log_graph_without_an_input_says_what_to_set(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class NoInput(Graphed):
        def __init__(self) -> None:
            super().__init__()
            self.example_input_array = None

    with caplog.at_level(logging.WARNING, logger="trainer"):
        TensorBoardLogger(tmp_path, log_graph=True).log_graph(NoInput())
    assert "example_input_array" in caplog.text


def test_tensorboard_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="log_graph"):
        TensorBoardLogger(tmp_path, log_graph="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="purge_step"):
        TensorBoardLogger(tmp_path, purge_step=3)


def test_csv_takes_lightnings_names(tmp_path: Path) -> None:
    """Lightning's CSVLogger(save_dir, name=None, prefix=, flush_logs_every_n_steps=): no
    experiment folder with name=None, `prefix-name` columns."""
    logger = CSVLogger(save_dir=tmp_path, name=None, prefix="p", flush_logs_every_n_steps=2)
    fit(logger, tmp_path / "root")
    assert logger.log_dir == tmp_path / "version_0" and logger.flush_every == 2
    with open(logger.log_dir / "metrics.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == sorted(header) and "step" in header and "p-loss" in header and "loss" not in header  # Lightning: sorted


def test_the_same_folders_names_and_weights_as_lightning(tmp_path: Path) -> None:
    """Under Lightning and ours, the same module with a graph-logging TensorBoardLogger and a
    CSVLogger: the same weights (tracing the graph draws what Lightning's draws), the event
    files in the same sub-folder, the same prefixed metric names."""
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger as TheirCSV
    from lightning.pytorch.loggers import TensorBoardLogger as TheirTB

    class Theirs(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
            self.example_input_array = torch.randn(2, 4)

        forward = Graphed.forward
        training_step = Graphed.training_step
        configure_optimizers = Graphed.configure_optimizers

    def loggers(tb: Any, csv_logger: Any, root: Path) -> list[Any]:
        return [tb(root, name="tb", log_graph=True, default_hp_metric=False, prefix="p", sub_dir="s"),
                csv_logger(save_dir=root, name="csv", prefix="p")]

    ours = fit(loggers(TensorBoardLogger, CSVLogger, tmp_path / "ours"), tmp_path / "ours")
    torch.manual_seed(0)
    theirs = Theirs()
    lightning.Trainer(max_epochs=1, logger=loggers(TheirTB, TheirCSV, tmp_path / "theirs"), enable_progress_bar=False,
                      log_every_n_steps=1, enable_checkpointing=False, enable_model_summary=False).fit(
        theirs, DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values(), strict=True))
    for root in ("ours", "theirs"):
        assert list((tmp_path / root / "tb" / "version_0" / "s").glob("events.out.tfevents.*"))
        with open(tmp_path / root / "csv" / "version_0" / "metrics.csv", newline="") as f:
            assert "p-loss" in next(csv.reader(f))
        assert "p-loss" in events(tmp_path / root / "tb").Tags()["scalars"]


OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_DISABLE_GIT": "true",
           "WANDB_DISABLE_CODE": "true"}


def test_wandb_takes_lightnings_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's WandbLogger(offline=True, dir=, version=, prefix=): an offline run with that
    id in that folder, names prefixed; log_model (uploading checkpoints) is refused with the
    call to make instead."""
    pytest.importorskip("wandb")
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    logger = WandbLogger(project="p", offline=True, dir=tmp_path / "wandb", version="lightning1", prefix="x")
    assert (logger.mode, logger.save_dir, logger.run_id) == ("offline", tmp_path / "wandb", "lightning1")
    fit(logger, tmp_path / "root")
    (folder,) = (tmp_path / "wandb" / "wandb").glob("offline-run-*-lightning1")
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(folder)],
                          capture_output=True, text=True, timeout=120)  # W&B's own reader of its run files
    if done.returncode != 0 and "No such command" in done.stderr:
        pytest.skip("this wandb has no `wandb leet inspect` (its reader of offline run files)")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    run = next(r["run"] for r in records if r["type"] == "run")
    assert (run["run_id"], run["project"]) == ("lightning1", "p")
    names = {name for r in records if r["type"] == "history" for name in r["history"]["item"]}
    assert "x-loss" in names and "x-train/loss" in names and "loss" not in names
    with pytest.raises(ValueError, match="log_model"):
        WandbLogger(log_model="all")


def test_a_wandb_run_passed_in_is_used_and_left_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wandb = pytest.importorskip("wandb")
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    run = wandb.init(project="p", dir=str(tmp_path), mode="offline", reinit="create_new")
    try:
        logger = WandbLogger(experiment=run)
        fit(logger, tmp_path / "root")
        assert logger.experiment is run and logger.run_id == run.id
        run.log({"after": 1.0})  # still open: the caller finishes it
    finally:
        run.finish()


def test_mlflow_takes_lightnings_names(tmp_path: Path) -> None:
    """Lightning's MLFlowLogger(save_dir=, prefix=): without a tracking URI, a store in save_dir
    (SQLite: MLflow 3 refuses the file store Lightning makes); metric names prefixed."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    os.environ.pop("MLFLOW_TRACKING_URI", None)
    logger = MLflowLogger("exp", save_dir=tmp_path / "mlruns", prefix="x")
    assert logger.tracking_uri == f"sqlite:///{(tmp_path / 'mlruns').resolve() / 'mlflow.db'}"
    fit(logger, tmp_path / "root")
    metrics = MlflowClient(tracking_uri=logger.tracking_uri).get_run(logger.run_id).data.metrics
    assert "x-loss" in metrics and "loss" not in metrics
    with pytest.raises(ValueError, match="log_model"):
        MLflowLogger(log_model=True)
