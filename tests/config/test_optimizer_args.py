"""LightningCLI's automatic `optimizer:` / `lr_scheduler:` sections, in `trainer fit` and a script's CLI.

The config's optimizer replaces the module's `configure_optimizers`: the run equals the same
module whose own `configure_optimizers` returns those objects (weights `torch.equal`), and,
where jsonargparse is installed, the same YAML run through Lightning's own LightningCLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.config import CLI, ConfigError, ReduceLROnPlateau, load_experiment, parse_yaml, prepare_config
from trainer.config.cli import split_overrides

REPO = Path(__file__).resolve().parents[2]
PKG = "tests.helpers.cli_pkg"
SGD = {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1, "momentum": 0.9}}
STEP = {"class_path": "StepLR", "init_args": {"step_size": 1, "gamma": 0.5}}


def config(tmp_path: Path, model: str = "TinyClassifier", **sections: Any) -> dict[str, Any]:
    trainer = {"max_epochs": 3, "root_dir": str(tmp_path), "logger": False, "enable_checkpointing": False,
               "enable_progress_bar": False, "device": "cpu"}
    return {"seed": 3, "model": {"class_path": f"{PKG}.models.{model}"}, "data": {"class_path": f"{PKG}.data.RandomData"},
            "trainer": trainer, **sections}


def weights(experiment: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in experiment.model.state_dict().items()}


def fit(source: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        experiment = load_experiment(source, overrides)
        experiment.fit()
    return experiment


# ---------------------------------------------------------------------------------- parsing
def test_names_resolve_and_defaults_are_filled(tmp_path: Path) -> None:
    plain = prepare_config(config(tmp_path, optimizer="Adam", lr_scheduler={"class_path": "StepLR", "init_args": {"step_size": 2}})).plain
    assert plain["optimizer"]["class_path"] == "torch.optim.Adam"
    assert plain["optimizer"]["init_args"]["lr"] == 0.001 and plain["optimizer"]["init_args"]["betas"] == [0.9, 0.999]
    assert "params" not in plain["optimizer"]["init_args"]
    assert plain["lr_scheduler"] == {"class_path": "torch.optim.lr_scheduler.StepLR",
                                     "init_args": {"step_size": 2, "gamma": 0.1, "last_epoch": -1}}
    for name in ("ReduceLROnPlateau", "lightning.pytorch.cli.ReduceLROnPlateau"):
        spec = {"class_path": name, "init_args": {"monitor": "val/loss"}}
        plain = prepare_config(config(tmp_path, optimizer="SGD", lr_scheduler=spec)).plain
        assert plain["lr_scheduler"]["class_path"] == "trainer.config.ReduceLROnPlateau"
        assert plain["lr_scheduler"]["init_args"]["monitor"] == "val/loss" and plain["lr_scheduler"]["init_args"]["patience"] == 10
    absent = prepare_config(config(tmp_path)).plain
    assert absent["optimizer"] is None and absent["lr_scheduler"] is None  # as LightningCLI prints them


def test_command_line_shorthand(tmp_path: Path) -> None:
    argv = ["--optimizer", "Adam", "--optimizer.lr", "0.01", "--lr_scheduler=StepLR", "--lr_scheduler.step_size", "3"]
    rest, overrides, problems = split_overrides(argv)
    assert not rest and not problems
    plain = prepare_config(config(tmp_path), overrides).plain
    assert plain["optimizer"]["class_path"] == "torch.optim.Adam" and plain["optimizer"]["init_args"]["lr"] == 0.01
    assert plain["lr_scheduler"]["init_args"]["step_size"] == 3
    # a new class keeps the init_args it accepts, as LightningCLI does: lr stays, momentum goes
    plain = prepare_config(config(tmp_path, optimizer={"class_path": "SGD", "init_args": {"lr": 0.3, "momentum": 0.9}}),
                           {"optimizer": "Adam"}).plain
    assert plain["optimizer"]["class_path"] == "torch.optim.Adam" and plain["optimizer"]["init_args"]["lr"] == 0.3
    assert "momentum" not in plain["optimizer"]["init_args"]
    plain = prepare_config(config(tmp_path, optimizer="SGD"), {"optimizer.momentum": 0.5}).plain
    assert plain["optimizer"]["class_path"] == "torch.optim.SGD" and plain["optimizer"]["init_args"]["momentum"] == 0.5


def test_a_later_file_merges_into_the_section(tmp_path: Path) -> None:
    from trainer.config.cli import _merge_files

    (tmp_path / "base.yaml").write_text("optimizer: {class_path: SGD, init_args: {lr: 0.3, momentum: 0.9}}\nlr_scheduler: StepLR\n")
    (tmp_path / "adam.yaml").write_text("optimizer: {class_path: Adam, init_args: {eps: 1.0e-6}}\n"
                                        "lr_scheduler: {init_args: {step_size: 4}}\n")
    merged = _merge_files([str(tmp_path / "base.yaml"), str(tmp_path / "adam.yaml")])
    assert merged["optimizer"] == {"class_path": "Adam", "init_args": {"lr": 0.3, "eps": 1e-6}}  # momentum: not Adam's
    assert merged["lr_scheduler"] == {"class_path": "StepLR", "init_args": {"step_size": 4}}


# ----------------------------------------------------------------------------------- errors
def test_every_mistake_at_once(tmp_path: Path) -> None:
    bad = config(tmp_path, optimizer={"class_path": "SGD", "init_args": {"lrr": 0.1, "momentum": "x", "params": []}},
                 lr_scheduler="torch.optim.lr_scheduler.ReduceLROnPlateau")
    with pytest.raises(ConfigError) as caught:
        prepare_config(bad)
    problems = {p.path: p.message for p in caught.value.problems}
    assert set(problems) == {"optimizer.init_args.lrr", "optimizer.init_args.momentum", "optimizer.init_args.params",
                             "lr_scheduler.class_path"}
    assert "Did you mean 'lr'?" in problems["optimizer.init_args.lrr"]
    assert "Received: 'x'" in problems["optimizer.init_args.momentum"]
    assert "monitor" in problems["lr_scheduler.class_path"]
    with pytest.raises(ConfigError) as caught:
        prepare_config(config(tmp_path, optimizer="Adamm", lr_scheduler="StepLR"))
    problems = {p.path: p.message for p in caught.value.problems}
    assert "Did you mean 'Adam'?" in problems["optimizer.class_path"]
    assert "missing required argument" in problems["lr_scheduler.init_args.step_size"]
    with pytest.raises(ConfigError) as caught:
        prepare_config(config(tmp_path, optimizer="torch.nn.Linear"), {"lr_scheduler.gamma": 0.5})
    paths = [p.path for p in caught.value.problems]
    assert "optimizer.class_path" in paths and "lr_scheduler.class_path" in paths


def test_fsdp_which_replaces_the_parameters_is_refused(tmp_path: Path) -> None:
    for strategy in ("fsdp", {"class_path": "trainer.distributed.FSDP"}):
        source = config(tmp_path, optimizer="SGD")
        source["trainer"]["strategy"] = strategy
        with pytest.raises(ConfigError, match="strategy fsdp replaces them"):
            prepare_config(source)


def test_a_value_the_optimizer_refuses_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"optimizer\.init_args: torch\.optim\.SGD\(\*\*init_args\) raised ValueError"):
        load_experiment(config(tmp_path, model="NoOptimizers", optimizer={"class_path": "SGD", "init_args": {"lr": -1.0}}))


def test_the_command_reports_them_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(f"model: {{class_path: {PKG}.models.TinyClassifier}}\ndata: {{class_path: {PKG}.data.RandomData}}\n"
                    "optimizer: {class_path: SGD, init_args: {lrr: 0.1}}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "trainer", "fit", str(path), "--lr_scheduler", "StepLR"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "optimizer.init_args.lrr: unknown argument of torch.optim.SGD. Did you mean 'lr'?" in done.stderr
    assert "lr_scheduler.init_args.step_size: missing required argument" in done.stderr
    printed = subprocess.run([sys.executable, "-m", "trainer", "fit", str(path), "--optimizer.lr", "0.2",
                              "--optimizer.lrr", "null", "--print_config"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 2  # lrr is still there: an override cannot remove a key
    path.write_text(path.read_text().replace("lrr: 0.1", "momentum: 0.9"))
    printed = subprocess.run([sys.executable, "-m", "trainer", "fit", str(path), "--optimizer.lr", "0.2", "--print_config"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    shown = parse_yaml(printed.stdout)
    assert shown["optimizer"]["init_args"]["lr"] == 0.2 and shown["optimizer"]["init_args"]["momentum"] == 0.9
    assert shown["lr_scheduler"] is None


# ---------------------------------------------------------------------------------- the run
def test_fit_equals_the_module_returning_the_same_objects(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"`TinyClassifier\.configure_optimizers` will be overridden"):
        ours = load_experiment(config(tmp_path, optimizer=SGD, lr_scheduler=STEP))
    ours.fit()
    reference = fit(config(tmp_path, model="Scheduled"))  # its configure_optimizers: SGD(0.1, momentum 0.9) + StepLR(1, 0.5)
    own = fit(config(tmp_path))  # TinyClassifier's own SGD(lr=0.1) without momentum
    assert ours.trainer.global_step == reference.trainer.global_step == 12
    assert all(torch.equal(a, b) for a, b in zip(weights(ours).values(), weights(reference).values(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(weights(ours).values(), weights(own).values(), strict=True))
    assert ours.trainer.optimizers[0].param_groups[0]["lr"] == reference.trainer.optimizers[0].param_groups[0]["lr"] == 0.1 * 0.5**3


def test_no_warning_without_the_modules_own_and_a_lone_scheduler_is_not_used(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        experiment = load_experiment(config(tmp_path, model="NoOptimizers", optimizer=SGD))
    assert not [w for w in caught if "will be overridden" in str(w.message)]
    assert isinstance(experiment.model.configure_optimizers(), torch.optim.SGD)
    with pytest.warns(UserWarning, match="lr_scheduler: torch.optim.lr_scheduler.StepLR is not used"):
        experiment = load_experiment(config(tmp_path, lr_scheduler=STEP))
    assert isinstance(experiment.model.configure_optimizers(), torch.optim.SGD)  # the module's own


def test_reduce_on_plateau_steps_on_its_monitor(tmp_path: Path) -> None:
    spec = {"class_path": "ReduceLROnPlateau", "init_args": {"monitor": "val/loss", "mode": "max", "patience": 0}}
    experiment = load_experiment(config(tmp_path, model="NoOptimizers", optimizer=SGD, lr_scheduler=spec))
    returned = experiment.model.configure_optimizers()
    assert isinstance(returned["lr_scheduler"]["scheduler"], ReduceLROnPlateau)
    assert returned["lr_scheduler"]["monitor"] == "val/loss"
    experiment.fit()
    assert returned["lr_scheduler"]["scheduler"].last_epoch == 3  # stepped once per epoch, on val/loss
    assert experiment.trainer.optimizers[0].param_groups[0]["lr"] < 0.1  # a falling loss is no progress in mode max


def test_the_checkpoint_records_the_sections_and_resume_is_exact(tmp_path: Path) -> None:
    sections = {"optimizer": SGD, "lr_scheduler": STEP}
    first = config(tmp_path / "a", model="NoOptimizers", **sections)
    first["trainer"].update(max_epochs=1, enable_checkpointing=True)
    fit(first)
    saved = next((tmp_path / "a").rglob("last.ckpt"))
    recorded = torch.load(saved, weights_only=True)["experiment"]
    assert recorded["optimizer"]["init_args"]["momentum"] == 0.9 and recorded["lr_scheduler"]["init_args"]["step_size"] == 1
    resumed = load_experiment(config(tmp_path / "b", model="NoOptimizers", **sections))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed.fit(ckpt_path=saved)
    straight = fit(config(tmp_path / "c", model="NoOptimizers", **sections))
    assert resumed.trainer.global_step == straight.trainer.global_step == 12
    assert all(torch.equal(a, b) for a, b in zip(weights(resumed).values(), weights(straight).values(), strict=True))


# ---------------------------------------------------------------------------- a script's CLI
def test_script_cli_takes_the_options_and_its_configure_optimizers(tmp_path: Path) -> None:
    from tests.helpers.cli_pkg.data import RandomData
    from tests.helpers.cli_pkg.models import TinyClassifier

    common = ["--trainer.root_dir", str(tmp_path), "--trainer.logger", "false"]
    with pytest.warns(UserWarning, match=r"`TinyClassifier\.configure_optimizers` will be overridden by `LightningCLI\.configure_optimizers`"):
        cli = CLI(TinyClassifier, RandomData, run=False, args=["--optimizer", "Adam", "--optimizer.lr", "0.01",
                                                                  "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "2", *common])
    optimizers, schedulers = cli.model.configure_optimizers()
    assert isinstance(optimizers[0], torch.optim.Adam) and optimizers[0].param_groups[0]["lr"] == 0.01
    assert isinstance(schedulers[0], torch.optim.lr_scheduler.StepLR) and schedulers[0].optimizer is optimizers[0]
    assert cli.config["optimizer"]["class_path"] == "torch.optim.Adam"

    class MyCLI(CLI):
        @staticmethod
        def configure_optimizers(lightning_module: Any, optimizer: Any, lr_scheduler: Any = None) -> Any:
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "interval": "step"}}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = MyCLI(TinyClassifier, RandomData, run=False, args=["--optimizer", "SGD", "--lr_scheduler", "StepLR",
                                                                    "--lr_scheduler.step_size", "1", *common])
    assert cli.model.configure_optimizers()["lr_scheduler"]["interval"] == "step"


def test_script_cli_without_auto_configure_optimizers_refuses_the_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers.cli_pkg.data import RandomData
    from tests.helpers.cli_pkg.models import TinyClassifier

    with pytest.raises(SystemExit) as exited:
        CLI(TinyClassifier, RandomData, run=False, auto_configure_optimizers=False, args=["--optimizer", "Adam", "--model.hidden", "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "optimizer: not taken" in err and "auto_configure_optimizers=False" in err and "model.init_args.hidden" in err
    cli = CLI(TinyClassifier, RandomData, run=False, auto_configure_optimizers=False,
              args=["--trainer.root_dir", str(tmp_path), "--trainer.logger", "false"])
    assert "optimizer" not in cli.config and isinstance(cli.model.configure_optimizers(), torch.optim.SGD)


# ------------------------------------------------------------------ against Lightning's own CLI
SCRIPT = '''\
import os

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainer import LightningDataModule, LightningModule
from trainer.cli import LightningCLI


class Model(LightningModule):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):  # replaced by the config's optimizer, with a warning
        return torch.optim.Adam(self.parameters())


class Data(LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        x = torch.randn(48, 4, generator=torch.Generator().manual_seed(0))
        self.dataset = TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)


if __name__ == "__main__":
    cli = LightningCLI(Model, Data, run=False, save_config_callback=None)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    lr = cli.trainer.optimizers[0].param_groups[0]["lr"]
    torch.save({"state_dict": cli.model.state_dict(), "lr": lr, "step": cli.trainer.global_step}, os.environ["OUT"])
'''
LIGHTNING_IMPORTS = {
    "from trainer import LightningDataModule, LightningModule": "from lightning.pytorch import LightningDataModule, LightningModule",
    "from trainer.cli import LightningCLI": "from lightning.pytorch.cli import LightningCLI",
}
EXPERIMENT = """\
seed_everything: 7
model:
  hidden: 6
trainer:
  max_epochs: 3
  accelerator: cpu
  default_root_dir: runs
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
optimizer:
  class_path: torch.optim.SGD
  init_args: {lr: 0.1, momentum: 0.9}
lr_scheduler:
  class_path: StepLR
  init_args: {step_size: 1, gamma: 0.5}
"""


def test_the_same_yaml_gives_lightningclis_weights(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    pytest.importorskip("jsonargparse")
    lightning = SCRIPT
    for ours, theirs in LIGHTNING_IMPORTS.items():
        assert ours in lightning
        lightning = lightning.replace(ours, theirs)
    results = {}
    for name, source in (("ours", SCRIPT), ("lightning", lightning)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.py").write_text(source)
        (folder / "exp.yaml").write_text(EXPERIMENT)
        env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(folder / "out.pt")}
        done = subprocess.run([sys.executable, "train.py", "--config", "exp.yaml"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "`Model.configure_optimizers` will be overridden by `" in done.stderr
        results[name] = torch.load(folder / "out.pt", weights_only=True)
    ours, theirs = results["ours"], results["lightning"]
    assert ours["step"] == theirs["step"] == 18 and ours["lr"] == theirs["lr"] == 0.1 * 0.5**3
    assert list(ours["state_dict"]) == list(theirs["state_dict"])
    different = [k for k, v in theirs["state_dict"].items() if not torch.equal(ours["state_dict"][k], v)]
    assert not different, f"weights differ from LightningCLI's: {different}"
