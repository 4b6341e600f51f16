"""A script's own command line, written the LightningCLI way: `LightningCLI(Model, DataModule)`.

The script runs as a user runs it (a subprocess on a file in a temporary folder); its result
equals the same run written in Python. The other modes (run=False, subclass mode, a module
with its own loaders) and the config spellings LightningCLI users bring are checked in-process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import DataModule, Module, Trainer
from trainer._utils import seed_everything
from trainer.cli import LightningCLI
from trainer.config import CLI, load_experiment, parse_yaml

SCRIPT = '''\
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import DataModule, Module
from trainer.cli import LightningCLI


class Model(Module):
    def __init__(self, hidden: int = 8, lr: float = 0.1) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(hidden, 3))
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", F.cross_entropy(self.net(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test/loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class Data(DataModule):
    def __init__(self, batch_size: int = 8, n: int = 64) -> None:
        super().__init__()
        self.batch_size, self.n = batch_size, n

    def setup(self, stage: str) -> None:  # datasets built where Lightning builds them
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.n, 4, generator=g)
        self.dataset = TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)


if __name__ == "__main__":
    LightningCLI(Model, Data)
'''
EXPERIMENT = """\
seed_everything: 7
model:
  hidden: 12
data:
  batch_size: 16
trainer:
  max_epochs: 1
  default_root_dir: runs
  accelerator: cpu
  enable_progress_bar: false
  logger: false
"""
OVERRIDES = ["--model.hidden", "16", "--model.init_args.lr", "0.05", "--trainer.max_epochs", "2"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("script")
    (root / "train.py").write_text(SCRIPT)
    (root / "exp.yaml").write_text(EXPERIMENT)
    return root


def script(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "train.py", *args], cwd=workspace, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def fitted(workspace: Path) -> Path:
    done = script(workspace, "fit", "--config", "exp.yaml", *OVERRIDES)
    assert done.returncode == 0, done.stderr
    return workspace / "runs" / "default" / "version_0" / "last.ckpt"


def test_the_script_trains_as_the_same_run_written_in_python(workspace: Path, fitted: Path, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("user_train", workspace / "train.py")
    assert spec is not None and spec.loader is not None
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    seed_everything(7)  # the config's seed, then the data, the model and the Trainer, in that order
    data = user.Data(batch_size=16)
    model = user.Model(hidden=16, lr=0.05)
    Trainer(max_epochs=2, root_dir=tmp_path, device="cpu", enable_progress_bar=False, logger=False).fit(model, datamodule=data)
    saved = torch.load(fitted, weights_only=True)
    assert saved["global_step"] == 2 * 4 and saved.get("epoch") == 1
    assert saved["state_dict"].keys() == model.state_dict().keys()
    for name, value in model.state_dict().items():
        assert torch.equal(saved["state_dict"][name], value), name
    config = parse_yaml((fitted.parent / "config.yaml").read_text())
    assert config["model"] == {"class_path": "__main__.Model", "init_args": {"hidden": 16, "lr": 0.05}}


def test_print_config_prints_the_resolved_config_that_gives_the_same_run(workspace: Path, fitted: Path) -> None:
    printed = script(workspace, "fit", "--config", "exp.yaml", *OVERRIDES, "--print_config")
    assert printed.returncode == 0, printed.stderr
    config = parse_yaml(printed.stdout)
    assert config["seed"] == 7 and "seed_everything" not in config
    assert config["model"] == {"class_path": "__main__.Model", "init_args": {"hidden": 16, "lr": 0.05}}
    assert config["data"] == {"class_path": "__main__.Data", "init_args": {"batch_size": 16, "n": 64}}
    assert config["trainer"]["max_epochs"] == 2 and config["trainer"]["root_dir"] == "runs" and config["trainer"]["device"] == "cpu"
    (workspace / "printed.yaml").write_text(printed.stdout)
    again = script(workspace, "fit", "--config", "printed.yaml", "--trainer.root_dir", "runs_again")
    assert again.returncode == 0, again.stderr
    first = torch.load(fitted, weights_only=True)["state_dict"]
    second = torch.load(workspace / "runs_again" / "default" / "version_0" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_bad_overrides_list_every_problem_at_once(workspace: Path) -> None:
    done = script(workspace, "fit", "--config", "exp.yaml", "--model.hiden", "3", "--trainer.max_epocs", "2",
                  "--data.batch_size", "x", "--trainer.accelerator", "tpu")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "has 4 problems" in done.stderr
    for expected in ("model.init_args.hiden: unknown argument of __main__.Model. Did you mean 'hidden'?",
                     "trainer.max_epocs: unknown field. Did you mean 'max_epochs'?",
                     "data.init_args.batch_size: Input should be a valid integer",
                     "trainer.accelerator: Trainer(accelerator='tpu') expected one of",
                     "(set on the command line: --model.hiden 3)"):
        assert expected in done.stderr, done.stderr
    assert not (workspace / "runs" / "default" / "version_1").exists()


def test_evaluate_a_checkpoint_and_the_help(workspace: Path, fitted: Path) -> None:
    tested = script(workspace, "test", "--config", "exp.yaml", "--model.hidden", "16", "--ckpt_path", str(fitted))
    assert tested.returncode == 0, tested.stderr
    assert "test/loss" in tested.stdout + tested.stderr
    missing = script(workspace, "validate", "--config", "exp.yaml", "--ckpt_path", "nope.ckpt")
    assert missing.returncode == 2 and "--ckpt_path: 'nope.ckpt' does not exist" in missing.stderr
    shown = script(workspace, "fit", "--help")
    assert shown.returncode == 0 and "--model.hidden" in shown.stdout and "--trainer.max_epochs" in shown.stdout
    assert "int = 8" in shown.stdout and "--model.help" in shown.stdout
    listed = script(workspace, "fit", "--model.help")
    assert listed.returncode == 0 and "--model.init_args.hidden: int = 8" in listed.stdout


# --------------------------------------------------------------------------- in-process
class Base(Module):
    def __init__(self, hidden: int = 4) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, hidden)
        self.head = torch.nn.Linear(hidden, 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.head(torch.relu(self.net(x))), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Wide(Base):
    def __init__(self, hidden: int = 4, extra: int = 2) -> None:
        super().__init__(hidden * extra)


class OwnLoaders(Base):
    def train_dataloader(self) -> DataLoader:
        x = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


class Points(DataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
        return DataLoader(TensorDataset(x, (x[:, 1] > 0).long()), batch_size=self.batch_size)


QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]


def test_run_false_builds_the_objects_for_the_script_to_fit(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("model: {hidden: 5}\ndata: {batch_size: 4}\ntrainer: {max_steps: 3}\n")
    cli = LightningCLI(Base, Points, args=["--config", str(config), "--model.hidden", "6", "--trainer.default_root_dir",
                                           str(tmp_path), *QUIET], run=False)
    assert isinstance(cli.model, Base) and cli.model.net.out_features == 6 and isinstance(cli.datamodule, Points)
    assert cli.datamodule.batch_size == 4 and cli.subcommand is None and isinstance(cli.config["seed"], int)  # seed_everything: true
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 3


def test_subclass_mode_takes_a_class_by_name_or_path_and_refuses_others(tmp_path: Path) -> None:
    common = ["--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path), *QUIET]
    cli = CLI(Base, Points, subclass_mode_model=True, args=["fit", "--model", "Wide", "--model.hidden", "3", *common])
    assert type(cli.model) is Wide and cli.model.net.out_features == 6 and cli.trainer.global_step == 1
    cli = CLI(Base, Points, subclass_mode_model=True, args={"fit": {"model": {"class_path": f"{__name__}.Wide"}, "trainer": {"max_steps": 1, "default_root_dir": str(tmp_path), "enable_progress_bar": False, "logger": False}}})
    assert type(cli.model) is Wide
    with pytest.raises(SystemExit) as exited:
        CLI(Wide, Points, subclass_mode_model=True, args=["fit", "--model", "trainer.Module", *common])
    assert exited.value.code == 2
    with pytest.raises(SystemExit):
        CLI(Base, Points, args=["fit", "--model.class_path", f"{__name__}.Wide", *common])  # not subclass mode


def test_subclass_mode_errors_name_the_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        CLI(Wide, Points, subclass_mode_model=True, args=["fit", "--model", "trainer.Module", "--trainer.max_epocs", "1"])
    err = capsys.readouterr().err
    assert "model.class_path: Expected a subclass of Wide. Received: 'trainer.Module'" in err and "Did you mean 'max_epochs'" in err
    with pytest.raises(SystemExit):
        CLI(Base, Points, args=["fit", "--model.class_path", f"{__name__}.Wide"])
    assert "subclass_mode_model=True" in capsys.readouterr().err


def test_a_module_with_its_own_loaders_needs_no_data_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = CLI(OwnLoaders, args=["fit", "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path), *QUIET])
    assert cli.datamodule is None and cli.trainer.global_step == 3 and "data" not in cli.config
    with pytest.raises(SystemExit):
        CLI(Base, args=["fit", *QUIET])
    assert "model: Base has no train_dataloader(), which `fit` needs, and this script has no data class" in capsys.readouterr().err


def test_seed_everything_and_lightning_trainer_spellings_in_yaml(tmp_path: Path) -> None:
    base = {"model": {"class_path": f"{__name__}.Base"}, "data": {"class_path": f"{__name__}.Points"}}
    lightning = {**base, "seed_everything": 5, "trainer": {"default_root_dir": str(tmp_path / "r"), "accelerator": "cpu",
                 "logger": False, "callbacks": {"class_path": "callbacks.EarlyStopping", "init_args": {"monitor": "x"}}}}
    experiment = load_experiment(lightning)  # the `trainer` command's YAML takes what Trainer() takes
    assert experiment.config["seed"] == 5 and str(experiment.trainer.args.root_dir) == str(tmp_path / "r")
    assert experiment.trainer.args.device == "cpu" and experiment.config["logger"] is False
    assert [type(c).__name__ for c in experiment.trainer.callbacks] == ["EarlyStopping"]
    drawn = load_experiment({**base, "seed_everything": True, "logger": False}).config["seed"]
    assert isinstance(drawn, int) and 0 <= drawn < 2**32  # a random seed, recorded
    assert load_experiment({**base, "seed_everything": False, "logger": False}).config["seed"] is None
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match="seed_everything: given with seed"):
        load_experiment({**base, "seed": 1, "seed_everything": 2})
    with pytest.raises(ConfigError, match="trainer.logger: given twice"):
        load_experiment({**base, "logger": False, "trainer": {"logger": False}})
