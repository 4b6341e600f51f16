"""Only the imports changed -> Lightning's exact weights, checked against real Lightning.

Each project in tests/helpers/lightning_projects is written the Lightning way with our imports.
The test reads its source, rewrites only the import lines to Lightning's, checks that nothing
else differs, runs both versions' `main(root_dir, precision)` in this process (same seed, same
data) and compares: every weight with `torch.equal`, `global_step`, `current_epoch`, and every
metric Lightning reports (validation and test values are epoch means computed in the same
order by both, so they are compared exactly too).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import PROJECTS, lightning_source, load_project, project_path

pytest.importorskip("lightning")

REPO = Path(__file__).resolve().parents[2]

#: Metrics logged per step inside an accumulation window: Lightning reports the last
#: micro-batch's value, ours the window's mean (docs/logging.md); test_step_metrics_... checks both.
WINDOW_MEAN = {"transformer_lm": {"train_loss"}}


def run(name: str, framework: str, root: Path, precision: str = "32-true", **kwargs: Any) -> dict[str, Any]:
    return load_project(name, framework).main(root / framework, precision, **kwargs)


def assert_same_weights(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert list(ours) == list(theirs)
    different = [key for key in ours if not torch.equal(ours[key], theirs[key])]
    assert not different, f"weights differ from Lightning's: {different}"


def floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {key: float(value) for key, value in metrics.items()}


def assert_same_run(name: str, ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert_same_weights(ours["model"].state_dict(), theirs["model"].state_dict())
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch
    for stage in ("val", "test"):
        if stage not in theirs:
            continue
        expected = {k: v for k, v in floats(theirs[stage]).items() if k not in WINDOW_MEAN.get(name, set())}
        got = floats(ours[stage])
        assert expected and {k: got.get(k) for k in expected} == expected, stage


# ----------------------------------------------------------------------------- the sources
@pytest.mark.parametrize("name", PROJECTS)
def test_only_the_import_lines_differ(name: str) -> None:
    ours = project_path(name).read_text()
    theirs = lightning_source(ours)
    assert "lightning" not in ours  # the project really runs on this package
    changed = [line for line in difflib.ndiff(ours.split("\n"), theirs.split("\n")) if line[:2] in ("- ", "+ ")]
    assert changed, "the project imports nothing from this package"
    for line in changed:
        assert line[2:].lstrip().startswith(("import ", "from ")), f"not an import line: {line!r}"
    assert len(ours.split("\n")) == len(theirs.split("\n"))
    assert not re.search(r"^\s*(import|from) (trainer|callbacks)\b", theirs, re.MULTILINE)
    assert all("lightning" in line for line in changed if line.startswith("+ "))


# ------------------------------------------------------------------------- weights and metrics
CASES = [
    ("boring", "32-true"), ("boring", "bf16-mixed"),
    ("gan", "32-true"),
    ("autoencoder", "32-true"), ("autoencoder", "bf16-mixed"),
    ("classifier", "32-true"), ("classifier", "bf16-mixed"),
    ("dqn", "32-true"), ("dqn", "bf16-mixed"),
    ("transformer_lm", "32-true"), ("transformer_lm", "bf16-mixed"),
]


@pytest.mark.parametrize(("name", "precision"), CASES)
def test_same_weights_steps_and_metrics_as_lightning(name: str, precision: str, tmp_path: Path) -> None:
    ours = run(name, "ours", tmp_path, precision)
    theirs = run(name, "lightning", tmp_path, precision)
    assert_same_run(name, ours, theirs)


def test_16_mixed_on_cpu(tmp_path: Path) -> None:
    """On a CPU Lightning runs precision='16-mixed' as 'bf16-mixed' (with a warning); so do we."""
    with pytest.warns(UserWarning, match="on a CPU runs as 'bf16-mixed'"):
        ours = run("boring", "ours", tmp_path, "16-mixed")
    assert_same_run("boring", ours, run("boring", "lightning", tmp_path, "16-mixed"))


def test_gan_bf16_mixed(tmp_path: Path) -> None:
    """Lightning autocasts without the weight cache, and so does our 'bf16-mixed': the GAN
    uses its discriminator twice in one step, where the cache would change the last bits."""
    assert_same_run("gan", run("gan", "ours", tmp_path, "bf16-mixed"), run("gan", "lightning", tmp_path, "bf16-mixed"))


def test_gan_under_our_bf16_keeps_the_cache_and_differs_from_lightning(tmp_path: Path) -> None:
    """Our own 'bf16' is a hand-written loop's autocast (cache on): its weights are not
    Lightning's here, which is why Lightning's spelling turns the cache off."""
    ours, theirs = run("gan", "ours", tmp_path, "bf16"), run("gan", "lightning", tmp_path, "bf16-mixed")
    theirs_weights = theirs["model"].state_dict()
    assert any(not torch.equal(tensor, theirs_weights[name]) for name, tensor in ours["model"].state_dict().items())


def test_early_stopping_and_best_checkpoint_as_lightning(tmp_path: Path) -> None:
    """The classifier stops early (EarlyStopping's min_delta) at the same epoch and tests the
    same best checkpoint (`ckpt_path="best"`), named as Lightning names it."""
    ours, theirs = run("classifier", "ours", tmp_path), run("classifier", "lightning", tmp_path)
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch < ours["trainer"].max_epochs
    best_ours, best_theirs = ours["trainer"].checkpoint_callback, theirs["trainer"].checkpoint_callback
    assert Path(best_ours.best_model_path).name == Path(best_theirs.best_model_path).name
    assert float(best_ours.best_model_score) == float(best_theirs.best_model_score)
    assert ours["test"]["test_loss"] == float(theirs["test"]["test_loss"])


def test_step_metrics_under_accumulation_are_the_window_mean(tmp_path: Path) -> None:
    """A deliberate difference: `self.log(name, loss)` in training_step under accumulation
    reports the window's mean here, the last micro-batch's value in Lightning."""
    results, losses = {}, {}
    for framework in ("ours", "lightning"):
        module = load_project("transformer_lm", framework)
        seen: list[torch.Tensor] = []
        step = module.LanguageModel.training_step

        def recording(self: Any, batch: Any, batch_idx: int, step: Any = step, seen: list[torch.Tensor] = seen) -> Any:
            loss = step(self, batch, batch_idx)
            seen.append(loss.detach().clone())
            return loss

        module.LanguageModel.training_step = recording
        results[framework], losses[framework] = module.main(tmp_path / framework), seen
    assert all(torch.equal(a, b) for a, b in zip(losses["ours"], losses["lightning"], strict=True))
    last, before = losses["ours"][-1], losses["ours"][-2]
    assert float(results["lightning"]["val"]["train_loss"]) == last.item()
    assert results["ours"]["val"]["train_loss"] == torch.stack([before, last]).mean().item() != last.item()


# ------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("saved", ["after fit", "in on_train_epoch_end"])
def test_a_lightning_checkpoint_continues_as_lightning_continues_it(saved: str, tmp_path: Path) -> None:
    """Lightning trains the autoencoder and saves at an epoch's end (`trainer.save_checkpoint`
    once fit returned, or from a callback's `on_train_epoch_end`, before the epoch counts as
    complete); our Trainer continuing that file reaches Lightning's own continuation."""
    first = run("autoencoder", "lightning", tmp_path / "first", max_epochs=2 if saved == "after fit" else 3,
                save_every_epoch_to=tmp_path / "saves")
    path = tmp_path / "after_fit.ckpt"
    if saved == "after fit":
        first["trainer"].save_checkpoint(path)
    else:
        path = tmp_path / "saves" / "epoch=1.ckpt"
    assert torch.load(path, weights_only=True)["global_step"] == 10
    ours = run("autoencoder", "ours", tmp_path, max_epochs=4, ckpt_path=str(path))
    theirs = run("autoencoder", "lightning", tmp_path, max_epochs=4, ckpt_path=str(path))
    assert_same_run("autoencoder", ours, theirs)
    assert ours["trainer"].global_step == 20


def _our_autoencoder_checkpoint(tmp_path: Path) -> tuple[dict[str, torch.Tensor], Path]:
    ours = run("autoencoder", "ours", tmp_path)
    path = tmp_path / "ours.ckpt"
    ours["trainer"].save_checkpoint(path)
    return ours["model"].state_dict(), path


class PlainAutoEncoder(torch.nn.Module):
    """The autoencoder's architecture as a plain module: no Lightning, no trainer."""

    def __init__(self, hidden_dim: int = 16) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(64, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 3))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(3, hidden_dim), torch.nn.ReLU(), torch.nn.Linear(hidden_dim, 64))


def test_our_checkpoint_weights_load_into_a_plain_module(tmp_path: Path) -> None:
    weights, path = _our_autoencoder_checkpoint(tmp_path)
    plain = PlainAutoEncoder()
    plain.load_state_dict(torch.load(path, weights_only=True)["state_dict"], strict=True)
    assert_same_weights(plain.state_dict(), weights)


def test_our_checkpoint_loads_through_lightnings_load_from_checkpoint(tmp_path: Path) -> None:
    weights, path = _our_autoencoder_checkpoint(tmp_path)
    twin = load_project("autoencoder", "lightning").LitAutoEncoder.load_from_checkpoint(path)
    assert_same_weights(twin.state_dict(), weights)
    assert dict(twin.hparams) == {"hidden_dim": 16, "learning_rate": 1e-3}


def test_only_lightnings_version_key_is_missing_for_load_from_checkpoint(tmp_path: Path) -> None:
    """With that one key added, Lightning's load_from_checkpoint reads the rest of our file:
    the module built from the saved hyperparameters, then the weights."""
    weights, path = _our_autoencoder_checkpoint(tmp_path)
    raw = torch.load(path, weights_only=True)
    raw["pytorch-lightning_version"] = "2.6.0"
    torch.save(raw, tmp_path / "with_version.ckpt")
    twin = load_project("autoencoder", "lightning").LitAutoEncoder.load_from_checkpoint(tmp_path / "with_version.ckpt")
    assert_same_weights(twin.state_dict(), weights)
    assert dict(twin.hparams) == {"hidden_dim": 16, "learning_rate": 1e-3}


# --------------------------------------------------------------------------------- LightningCLI
CLI_CONFIG = """\
seed_everything: 3
model:
  learning_rate: 0.01
data:
  batch_size: 16
trainer:
  max_epochs: 3
  logger: false
  enable_progress_bar: false
  enable_model_summary: false
"""


@pytest.mark.slow
def test_lightning_cli_same_final_weights(tmp_path: Path) -> None:
    """`python classifier.py fit --config exp.yaml` in a subprocess, for each framework, with
    the same YAML: the final checkpoints hold the same weights, step and epoch."""
    (tmp_path / "exp.yaml").write_text(CLI_CONFIG)
    source = project_path("classifier").read_text()
    scripts = {"ours": source, "lightning": lightning_source(source)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    processes = {}
    for framework, text in scripts.items():
        (tmp_path / f"{framework}_classifier.py").write_text(text)
        command = [sys.executable, f"{framework}_classifier.py", "fit", "--config", "exp.yaml",
                   "--trainer.default_root_dir", str(tmp_path / framework)]
        processes[framework] = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True)
    for framework, process in processes.items():
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, f"{framework}:\n{output}"
    ours_file, = (tmp_path / "ours").rglob("last.ckpt")  # the Trainer's own last.ckpt
    theirs_file, = (tmp_path / "lightning" / "checkpoints").glob("*.ckpt")  # the default ModelCheckpoint's
    assert theirs_file.name == "epoch=2-step=18.ckpt"
    ours, theirs = (torch.load(f, weights_only=True) for f in (ours_file, theirs_file))
    assert_same_weights(ours["state_dict"], theirs["state_dict"])
    assert ours["global_step"] == theirs["global_step"] == 18
    lightning_own = {key: value for key, value in theirs["hyper_parameters"].items() if not key.startswith("_")}
    assert ours["hyper_parameters"] == lightning_own  # Lightning's CLI adds its "_instantiator"


def _cli(framework: str, tmp_path: Path, **kwargs: Any) -> Any:
    module = load_project("classifier", framework)
    args = {"trainer": {"default_root_dir": str(tmp_path), "logger": False}, **kwargs.pop("args", {})}
    return module.LightningCLI(module.LitClassifier, module.ShapesData, args=args, run=False, **kwargs)


@pytest.mark.parametrize("framework", ["lightning", "ours"])
def test_cli_trainer_defaults_take_callback_instances(framework: str, tmp_path: Path) -> None:
    module = load_project("classifier", framework)
    cli = module.LightningCLI(module.LitClassifier, module.ShapesData, run=False,
                              args={"trainer": {"default_root_dir": str(tmp_path), "logger": False}},
                              trainer_defaults={"callbacks": module.make_callbacks()})
    assert cli.trainer.early_stopping_callback is not None
    assert cli.trainer.checkpoint_callback.monitor == "val_loss"


@pytest.mark.parametrize("framework", ["lightning", "ours"])
def test_cli_takes_save_config_kwargs(framework: str, tmp_path: Path) -> None:
    cli = _cli(framework, tmp_path, save_config_kwargs={"overwrite": True})
    assert cli.model is not None


@pytest.mark.parametrize("framework", ["lightning", "ours"])
def test_cli_config_takes_short_callback_names(framework: str, tmp_path: Path) -> None:
    callback = {"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss", "patience": 1}}
    cli = _cli(framework, tmp_path, args={"trainer": {"default_root_dir": str(tmp_path), "logger": False,
                                                      "callbacks": [callback]}})
    assert cli.trainer.early_stopping_callback.patience == 1
