"""The loggers besides TensorBoard: CSVLogger's file, logger=[...], the optional trackers'
errors and their adapters, and which run a resume continues (tests/logging/test_trackers_resume.py
checks the values across a resume)."""

from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

import callbacks
from trainer import Module, Trainer
from trainer.loggers import CSVLogger, LoggerList, MLflowLogger, TensorBoardLogger, WandbLogger


class Line(Module):
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(n: int = 16) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def quiet(root: Path, **kwargs) -> Trainer:
    return Trainer(root_dir=root, enable_progress_bar=False, log_every_n_steps=1, **kwargs)


# ------------------------------------------------------------------------------ CSVLogger
def test_csv_header_widens_by_rewriting_the_file_and_rows_are_appended_otherwise(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_every=2)
    logger.log_metrics({"a": 1.0}, step=1)
    logger.log_metrics({"a": 2.0}, step=2)
    logger.log_metrics({"a": 3.0}, step=3)  # a third step: the first two are written
    path = logger.metrics_path
    assert rows(path) == [["a", "step"], ["1.0", "1"], ["2.0", "2"]]  # Lightning's sorted columns
    logger.log_metrics({"a": 4.0}, step=4)
    logger.flush()
    assert rows(path) == [["a", "step"], ["1.0", "1"], ["2.0", "2"], ["3.0", "3"], ["4.0", "4"]]
    logger.log_metrics({"b": 0.5}, step=5)  # a new column: the whole file gets the wider header
    logger.close()
    assert rows(path) == [["a", "b", "step"], ["1.0", "", "1"], ["2.0", "", "2"], ["3.0", "", "3"], ["4.0", "", "4"], ["", "0.5", "5"]]
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.csv"]  # no temporary file left
    assert b"\r" not in path.read_bytes()  # appended and rewritten rows end the same way


def test_csv_values_logged_later_at_the_same_step_get_their_own_row(tmp_path: Path) -> None:
    """Lightning's layout: a validate() after fit writes its own row at the same step."""
    trainer = quiet(tmp_path, max_steps=4, logger=CSVLogger(tmp_path))
    model = Line()
    trainer.fit(model, loader())
    trainer.validate(model, loader())  # at step 4 again, after fit flushed and closed the file
    with open(trainer.log_dir / "metrics.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [r["step"] for r in table] == ["1", "2", "3", "4", "4"]
    assert table[-2]["train/loss"] and not table[-2]["val/loss"]
    assert table[-1]["val/loss"] and not table[-1]["train/loss"] and table[-1]["epoch"] == str(trainer.current_epoch)


def test_csv_hparams_yaml_holds_the_modules_and_trainers_arguments(tmp_path: Path) -> None:
    trainer = quiet(tmp_path, max_steps=2, logger=CSVLogger(tmp_path))
    trainer.fit(Line(width=3), loader())
    params = yaml.safe_load((trainer.log_dir / "hparams.yaml").read_text())
    assert params["module"] == {"width": 3}
    assert params["trainer"]["max_steps"] == 2 and params["trainer"]["precision"] == "fp32"


def test_csv_continue_run_drops_rows_after_the_step_and_keeps_the_header(tmp_path: Path) -> None:
    first = CSVLogger(tmp_path)
    for step in range(1, 6):
        first.log_metrics({"a": float(step)}, step=step)
    first.log_metrics({"b": 9.0}, step=5)
    first.close()
    second = CSVLogger(tmp_path)
    assert second.continue_run(first.run_identity() or {}, step=3)
    second.log_metrics({"a": 40.0}, step=4)
    second.close()
    assert second.log_dir == first.log_dir
    assert rows(first.metrics_path) == [["a", "b", "step"], ["1.0", "", "1"], ["2.0", "", "2"], ["3.0", "", "3"], ["40.0", "", "4"]]


def test_csv_logger_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="expected a folder name"):
        CSVLogger("runs", name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="flush_every"):
        CSVLogger("runs", flush_every=0)
    with pytest.raises(ValueError, match="not both"):
        CSVLogger("runs", version=1, version_dir="runs/x")


# --------------------------------------------------------------------------- logger=[...]
def test_a_list_of_loggers_gets_the_same_values_in_one_run_folder(tmp_path: Path) -> None:
    tensorboard, table = TensorBoardLogger(tmp_path), CSVLogger(tmp_path)
    monitor = callbacks.LearningRateMonitor(logging_interval="epoch")
    trainer = quiet(tmp_path, max_epochs=2, logger=[tensorboard, table], callbacks=[monitor])
    trainer.fit(Line(), loader(), loader())
    assert trainer.logger is tensorboard and trainer.loggers == [tensorboard, table]  # Lightning's rule
    assert tensorboard.log_dir == table.log_dir == trainer.log_dir == tmp_path / "default" / "version_0"
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == ["version_0"]
    assert (trainer.log_dir / "last.ckpt").exists() and (trainer.log_dir / "hparams.yaml").exists()
    header = rows(table.metrics_path)[0]
    assert {"train/loss", "val/loss", "lr-SGD"} <= set(header)  # the callback's values reach every logger

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(trainer.log_dir))
    events.Reload()
    assert {"train/loss", "val/loss", "lr-SGD"} <= set(events.Tags()["scalars"])


def test_loggers_of_other_experiments_keep_their_own_folders(tmp_path: Path) -> None:
    both = LoggerList([TensorBoardLogger(tmp_path, name="a"), CSVLogger(tmp_path, name="b")])
    both.log_metrics({"x": 1.0}, step=1)
    both.close()
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["a", "b"]


def test_logger_list_is_checked_and_an_empty_list_logs_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"item 1 \(a int\) is not a logger"):
        Trainer(logger=[CSVLogger(tmp_path), 3])
    trainer = quiet(tmp_path / "runs", max_steps=2, logger=[], enable_checkpointing=False)
    trainer.fit(Line(), loader())
    assert trainer.logger is None and trainer.loggers == [] and not (tmp_path / "runs").exists()


class Broken(CSVLogger):
    def close(self) -> None:
        raise OSError("disk full")


def test_a_failing_logger_does_not_keep_the_others_from_closing(tmp_path: Path) -> None:
    good = TensorBoardLogger(tmp_path)
    both = LoggerList([Broken(tmp_path), good])
    both.log_metrics({"x": 1.0}, step=1)
    with pytest.raises(OSError, match="disk full"):
        both.close()
    assert good._writer is None  # closed


# ------------------------------------------------------------------------ which run continues
def test_a_logger_naming_its_own_folder_keeps_it_on_resume(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = quiet(tmp_path, max_steps=2)
    first.fit(Line(), loader())
    resumed = quiet(tmp_path, max_steps=4, logger=TensorBoardLogger(tmp_path, version="finetune"))
    resumed.fit(Line(), loader(), ckpt_path=str(first.log_dir / "last.ckpt"))
    assert resumed.log_dir == tmp_path / "default" / "finetune"
    default = quiet(tmp_path, max_steps=6)
    with caplog.at_level(logging.INFO, logger="trainer"):
        default.fit(Line(), loader(), ckpt_path=str(resumed.log_dir / "last.ckpt"))
    assert default.log_dir == tmp_path / "default" / "finetune"  # the checkpoint's run, continued
    assert "TensorBoardLogger continues the run of the checkpoint" in caplog.text


def test_a_folder_logger_of_another_experiment_name_starts_its_own_run(tmp_path: Path) -> None:
    first = quiet(tmp_path, max_steps=2)
    first.fit(Line(), loader())
    other = quiet(tmp_path, max_steps=4, logger=TensorBoardLogger(tmp_path, name="mlp"))
    other.fit(Line(), loader(), ckpt_path=str(first.log_dir / "last.ckpt"))
    assert other.log_dir == tmp_path / "mlp" / "version_0"


def test_a_moved_runs_folder_is_found_again(tmp_path: Path) -> None:
    first = quiet(tmp_path / "old", max_steps=2, logger=CSVLogger(tmp_path / "old"))
    first.fit(Line(), loader())
    (tmp_path / "old").rename(tmp_path / "new")
    moved = quiet(tmp_path / "new", max_steps=4, logger=CSVLogger(tmp_path / "new"))
    moved.fit(Line(), loader(), ckpt_path=str(tmp_path / "new" / "default" / "version_0" / "last.ckpt"))
    assert moved.log_dir == tmp_path / "new" / "default" / "version_0"
    table = rows(moved.log_dir / "metrics.csv")
    assert [r[table[0].index("step")] for r in table[1:]] == ["1", "2", "3", "4"]


# ----------------------------------------------------------------------- optional trackers
@pytest.mark.parametrize("logger, module, extra", [(WandbLogger, "wandb", "wandb"), (MLflowLogger, "mlflow", "mlflow")])
def test_a_missing_tracker_library_names_the_pip_extra(monkeypatch: pytest.MonkeyPatch, logger, module: str, extra: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    with pytest.raises(ImportError, match=rf"pip install 'loopwright\[{extra}\]' \(or pip install {module}\)"):
        logger()


def test_wandb_logger_refuses_the_arguments_it_sets_itself() -> None:
    pytest.importorskip("wandb")
    with pytest.raises(ValueError, match="resume"):
        WandbLogger(project="p", resume="must")


def test_mlflow_logger_starts_a_new_run_when_the_saved_one_is_not_in_its_store(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = MLflowLogger("e", tracking_uri=uri)
    assert logger.continue_run({"run_id": "0123456789abcdef0123456789abcdef"}, step=3)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        logger.log_metrics({"a@b": 1.0}, step=4)  # '@' is not allowed in MLflow names
    logger.log_hyperparams({"trainer": {"max_epochs": 3, "odd key!": "x" * 7000}})
    logger.close()
    assert "is not in the tracking store" in caplog.text
    run = MlflowClient(tracking_uri=uri).get_run(logger.run_id or "")
    assert run.info.status == "FINISHED" and run.data.metrics == {"a_b": 1.0}
    assert run.data.params["trainer/max_epochs"] == "3" and len(run.data.params["trainer/odd key_"]) == 6000


# ------------------------------------------------------------------------------------- YAML
def test_a_yaml_experiment_takes_a_list_of_loggers_and_each_gets_the_resolved_config(tmp_path: Path) -> None:
    from trainer.config import ConfigError, load_experiment

    root = str(tmp_path / "runs")
    config = {
        "seed": 0,
        "model": {"class_path": "tests.helpers.cli_pkg.models.TinyClassifier", "init_args": {"hidden": 6}},
        "data": {"class_path": "tests.helpers.cli_pkg.data.RandomData", "init_args": {"batch_size": 8}},
        "trainer": {"max_steps": 2, "log_every_n_steps": 1, "enable_progress_bar": False, "root_dir": root},
        "logger": [{"class_path": "trainer.loggers.TensorBoardLogger", "init_args": {"root_dir": root}},
                   {"class_path": "trainer.loggers.CSVLogger", "init_args": {"root_dir": root}}],
    }
    experiment = load_experiment(config)
    assert [type(lg).__name__ for lg in experiment.trainer.loggers] == ["TensorBoardLogger", "CSVLogger"]
    experiment.fit()
    folder = experiment.trainer.log_dir
    params = yaml.safe_load((folder / "hparams.yaml").read_text())
    assert params["experiment"]["model"]["init_args"]["hidden"] == 6  # the resolved config
    assert (folder / "config.yaml").exists() and (folder / "metrics.csv").exists()

    config["logger"][1]["init_args"]["bogus"] = 1
    with pytest.raises(ConfigError, match=r"logger\[1\]\.init_args"):
        load_experiment(config)
    config["logger"] = 3
    with pytest.raises(ConfigError, match="or a list of them"):
        load_experiment(config)
