"""LightningCLI's other arguments and spellings, on the script CLI and the `trainer` command.

`trainer_defaults` holding objects (persistent callback instances, a logger instance),
`save_config_kwargs` (and the arguments that mean nothing here, refused with a ValueError that
names them), and the short class names of a config (`class_path: EarlyStopping`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from trainer import Callback, DataModule, Module
from trainer.cli import LightningCLI
from trainer.config import ConfigError, load_experiment, parse_yaml
from trainer.config.cli import main
from trainer.loggers import CSVLogger

REPO = Path(__file__).resolve().parents[2]


class Net(Module):
    def __init__(self, hidden: int = 4) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Points(DataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def _loader(self) -> DataLoader:
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
        return DataLoader(TensorDataset(x, (x[:, 1] > 0).long()), batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()


class Counting(Callback):
    """A callback defined beside the script: its name alone finds it, as in LightningCLI."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.batches += 1


def trainer_args(root: Path, **more: Any) -> dict[str, Any]:
    return {"default_root_dir": str(root), "logger": False, "enable_progress_bar": False, **more}


def build(root: Path, trainer: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    config = {"trainer": trainer_args(root, **(trainer or {}))}
    return LightningCLI(Net, Points, args=config, run=False, **kwargs)


def fit(root: Path, *more: str, **kwargs: Any) -> Any:
    args = ["fit", "--trainer.default_root_dir", str(root), "--trainer.max_steps", "2", "--trainer.logger", "false",
            "--trainer.enable_progress_bar", "false", *more]
    return LightningCLI(Net, Points, args=args, **kwargs)


# ----------------------------------------------------------------------- trainer_defaults
def test_trainer_defaults_callbacks_are_appended_after_the_configs_and_run(tmp_path: Path) -> None:
    counting, stopping = Counting(), EarlyStopping(monitor="val/loss", patience=3)
    config = [{"class_path": "LearningRateMonitor"}]
    cli = build(tmp_path, {"callbacks": config}, trainer_defaults={"callbacks": [counting, stopping], "max_steps": 2})
    mine = [c for c in cli.trainer.callbacks if isinstance(c, (LearningRateMonitor, Counting, EarlyStopping))]
    assert [type(c) for c in mine] == [LearningRateMonitor, Counting, EarlyStopping]  # LightningCLI's order
    assert mine[1] is counting and mine[2] is stopping and cli.trainer.early_stopping_callback is stopping
    assert [c["class_path"] for c in cli.config["callbacks"]] == ["callbacks.LearningRateMonitor"]  # not config values
    assert cli.config["trainer"]["max_steps"] == 2
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert counting.batches == 2


def test_trainer_defaults_take_one_callback_and_a_checkpoint_instance(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(monitor="val/loss")
    cli = build(tmp_path, trainer_defaults={"callbacks": checkpoint})
    assert cli.trainer.checkpoint_callback is checkpoint


def test_an_object_default_is_used_unless_the_config_sets_that_argument(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path / "csv")
    cli = LightningCLI(Net, Points, run=False, args={"trainer": {"default_root_dir": str(tmp_path)}},
                       trainer_defaults={"logger": logger})
    assert cli.trainer.logger is logger and "logger" not in cli.config  # an object is not written as config
    cli = LightningCLI(Net, Points, run=False, args=["--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path)],
                       trainer_defaults={"logger": logger})
    assert cli.trainer.logger is None and cli.config["logger"] is False
    cli = build(tmp_path, trainer_defaults={"logger": logger})  # `trainer: {logger: false}` in the config
    assert cli.trainer.logger is None


def test_trainer_defaults_values_are_still_checked_as_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build(tmp_path, trainer_defaults={"max_epocs": 3, "precision": "fp16"})
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Did you mean 'max_epochs'" in err and "trainer.precision" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("defaults", "expected"), [
    ({"callbacks": [{"class_path": "callbacks.EarlyStopping"}]}, r"callbacks\[0\] is .*not a Callback instance"),
    ({"callbacks": [Counting(), "EarlyStopping"]}, r"callbacks\[1\] is 'EarlyStopping'"),
    ({"loger": CSVLogger(".")}, r"'loger' holds the object .* Did you mean 'logger'"),
    (["max_epochs", 1], "expected a dict of Trainer arguments"),
])
def test_trainer_defaults_errors_name_the_argument(tmp_path: Path, defaults: Any, expected: str) -> None:
    with pytest.raises(ValueError, match=r"LightningCLI\(trainer_defaults=\.\.\.\): " + expected):
        build(tmp_path, trainer_defaults=defaults)


# ---------------------------------------------------------------------- save_config_kwargs
def test_config_filename_names_the_saved_config(tmp_path: Path) -> None:
    cli = fit(tmp_path, save_config_kwargs={"config_filename": "run.yaml"})
    folder = Path(cli.trainer.log_dir)
    assert (folder / "run.yaml").is_file() and not (folder / "config.yaml").exists()
    assert parse_yaml((folder / "run.yaml").read_text())["trainer"]["max_steps"] == 2


def test_overwrite_false_refuses_an_existing_config_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    named = ("--trainer.run_name", "r1")
    first = fit(tmp_path, *named)
    last = Path(first.trainer.log_dir) / "last.ckpt"
    fit(tmp_path, *named, "--ckpt_path", "last", "--trainer.max_steps", "3")  # not given: a resumed run rewrites its own
    assert parse_yaml((last.parent / "config.yaml").read_text())["trainer"]["max_steps"] == 3
    written = last.stat().st_mtime_ns
    with pytest.raises(SystemExit) as exited:
        fit(tmp_path, *named, save_config_kwargs={"overwrite": False})
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "config.yaml exists already" in err and "'overwrite': True" in err
    assert last.stat().st_mtime_ns == written  # nothing trained, nothing written
    again = fit(tmp_path, *named, "--ckpt_path", "last", "--trainer.max_steps", "4", save_config_kwargs={"overwrite": True})
    assert parse_yaml((Path(again.trainer.log_dir) / "config.yaml").read_text())["trainer"]["max_steps"] == 4
    assert again.trainer.global_step == 4


class SetupRecorded(Net):
    """Net whose `setup` hook records each call (in `SETUPS`)."""

    def setup(self, stage: str) -> None:
        SETUPS.append(stage)


SETUPS: list[str] = []


def test_overwrite_false_refuses_a_named_runs_config_before_any_hook_runs(tmp_path: Path) -> None:
    named = ("--trainer.run_name", "r1")
    fit(tmp_path, *named)
    SETUPS.clear()
    with pytest.raises(SystemExit) as exited:
        LightningCLI(SetupRecorded, Points, args=["fit", "--trainer.default_root_dir", str(tmp_path), *named,
                                                  "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"],
                     save_config_kwargs={"overwrite": False})
    assert exited.value.code == 2 and SETUPS == []  # the run's folder is known before it starts: refused first


def test_save_config_callback_none_writes_no_config(tmp_path: Path) -> None:
    cli = fit(tmp_path, save_config_callback=None, save_config_kwargs={"overwrite": True})
    assert not (Path(cli.trainer.log_dir) / "config.yaml").exists() and (Path(cli.trainer.log_dir) / "last.ckpt").exists()


class SaveElsewhere:
    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None: ...


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"save_config_kwargs": {"overwrte": True}}, r"save_config_kwargs=\.\.\.\): unknown key 'overwrte'\. Did you mean 'overwrite'"),
    ({"save_config_kwargs": {"overwrite": "yes"}}, r"'overwrite' expects True or False"),
    ({"save_config_kwargs": {"multifile": True}}, r"multifile=True is not taken"),
    ({"save_config_kwargs": {"save_to_log_dir": False}}, r"save_to_log_dir=False .* save_config_callback=None"),
    ({"save_config_kwargs": {"config_filename": ""}}, r"'config_filename' expects a file name"),
    ({"save_config_callback": SaveElsewhere}, r"save_config_callback=\.\.\.\): received the class SaveElsewhere"),
    ({"parser_class": object}, r"parser_class=\.\.\.\): .* no jsonargparse parser"),
    ({"parser_kwargs": {"default_env": True}}, r"parser_kwargs=\.\.\.\): 'default_env' is not taken: .*environment"),
    ({"parser_kwargs": {"fit": {"parser_mode": "omegaconf"}}}, r"parser_kwargs=\.\.\.\)\['fit'\]: 'parser_mode'"),
    ({"parser_kwargs": {"descripton": "x"}}, r"Did you mean 'description'"),
    ({"load_from_checkpoint_support": "no"}, r"load_from_checkpoint_support=\.\.\.\): expected True or False"),
])
def test_arguments_without_a_meaning_here_are_a_value_error(tmp_path: Path, kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        build(tmp_path / "never", **kwargs)
    assert not (tmp_path / "never").exists()  # refused before any work


def test_lightnings_other_arguments_are_accepted(tmp_path: Path) -> None:
    cli = build(tmp_path, save_config_kwargs={"overwrite": True, "multifile": False, "save_to_log_dir": True},
                parser_kwargs={"description": "d", "fit": {"default_config_files": []}}, parser_class=None,
                load_from_checkpoint_support=False, seed_everything_default=4)
    assert cli.config["seed"] == 4


# ---------------------------------------------------------------------------- short names
def test_short_class_names_resolve_in_our_callbacks_and_loggers(tmp_path: Path) -> None:
    callbacks = [{"class_path": "EarlyStopping", "init_args": {"monitor": "val/loss", "patience": 1}},
                 {"class_path": "ModelCheckpoint", "init_args": {"monitor": "val/loss"}}, {"class_path": "Counting"}]
    logger = {"class_path": "CSVLogger", "init_args": {"root_dir": str(tmp_path / "csv")}}
    cli = build(tmp_path, {"callbacks": callbacks, "logger": logger})
    assert cli.trainer.early_stopping_callback.patience == 1 and cli.trainer.checkpoint_callback.monitor == "val/loss"
    assert isinstance(cli.trainer.logger, CSVLogger) and any(isinstance(c, Counting) for c in cli.trainer.callbacks)
    assert [c["class_path"] for c in cli.config["callbacks"]] == [
        "callbacks.EarlyStopping", "callbacks.ModelCheckpoint", f"{__name__}.Counting"]  # the saved config: full paths
    assert cli.config["logger"]["class_path"] == "trainer.loggers.CSVLogger"
    experiment = load_experiment({**cli.config, "logger": [logger, {"class_path": "TensorBoardLogger",
                                                                    "init_args": {"root_dir": str(tmp_path)}}]})
    assert [type(each).__name__ for each in experiment.trainer.loggers] == ["CSVLogger", "TensorBoardLogger"]


def test_unknown_short_names_are_reported_together_with_a_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = {"callbacks": [{"class_path": "EarlyStoping"}], "logger": {"class_path": "CSVLoger"}}
    with pytest.raises(SystemExit) as exited:
        build(tmp_path, trainer)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "has 2 problems" in err
    assert "callbacks[0].class_path: cannot find a class named 'EarlyStoping' in 'callbacks'. Did you mean 'EarlyStopping'?" in err
    assert "logger.class_path: cannot find a class named 'CSVLoger' in 'trainer.loggers'. Did you mean 'CSVLogger'?" in err
    with pytest.raises(ConfigError, match=r"callbacks\[0\]\.class_path: .*'NoSuchCallback'.*a dotted import path"):
        load_experiment({"model": {"class_path": f"{__name__}.Net"}, "data": {"class_path": f"{__name__}.Points"},
                         "callbacks": [{"class_path": "NoSuchCallback"}]})


USER_CALLBACKS = "raise RuntimeError('the user file was imported')\n"
EXPERIMENT = f"""\
model: {{class_path: {__name__}.Net}}
data: {{class_path: {__name__}.Points}}
trainer:
  callbacks: [{{class_path: EarlyStopping, init_args: {{monitor: val/loss}}}}]
  logger: {{class_path: CSVLogger, init_args: {{root_dir: logs}}}}
"""


def test_the_trainer_command_takes_short_names_and_never_reads_a_users_callbacks_py(tmp_path: Path) -> None:
    (tmp_path / "callbacks.py").write_text(USER_CALLBACKS)  # beside the YAML: must not shadow ours
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "trainer", "fit", "exp.yaml", "--print_config"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    config = parse_yaml(done.stdout)
    assert config["callbacks"][0]["class_path"] == "callbacks.EarlyStopping"
    assert config["logger"]["class_path"] == "trainer.loggers.CSVLogger"


def test_the_trainer_command_reports_an_unknown_short_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.yaml").write_text(EXPERIMENT.replace("EarlyStopping", "EarlyStop"))
    assert main(["fit", str(tmp_path / "exp.yaml"), "--print_config"]) == 2
    assert "Did you mean 'EarlyStopping'?" in capsys.readouterr().err



SCRIPT = """\
import torch
from trainer import Module
from trainer.cli import LightningCLI


class Net(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(2, 1)

    def train_dataloader(self):
        return [torch.zeros(1, 2)]


LightningCLI(Net)
"""


def test_a_script_beside_its_own_callbacks_py_is_told_to_rename_it(tmp_path: Path) -> None:
    """`python train.py` puts the script's folder first on the import path, so there `callbacks`
    is the user's file: a short name is then refused with what to do, never read from that file."""
    (tmp_path / "callbacks.py").write_text("class EarlyStopping:\n    pass\n")
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "exp.yaml").write_text("trainer:\n  callbacks: [{class_path: EarlyStopping}]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "train.py", "fit", "--config", "exp.yaml", "--print_config"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"`callbacks` is imported from {tmp_path / 'callbacks.py'}" in done.stderr and "rename that file" in done.stderr
