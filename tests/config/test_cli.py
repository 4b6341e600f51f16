"""The `trainer` command, run as a user runs it: a subprocess on a package in a temporary folder.

The kinds of user mistake are also checked in-process through `trainer.config.cli.main` (the
function the console script calls): same code, same exit code and message, without
paying the ~3 s torch import for each; two of them also run end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F

from trainer.config.cli import COMMANDS, main, prediction_path
from trainer.distributed import Strategy

TESTS = Path(__file__).parents[1]
EXPERIMENT = """\
seed: 3
model:
  class_path: mypkg.models.TinyClassifier
  init_args: {hidden: 6, lr: 1e-1}
data:
  class_path: mypkg.data.RandomData
  init_args: {batch_size: 8}
trainer:
  max_epochs: 1
  log_every_n_steps: 2
  enable_progress_bar: false
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a user package `mypkg` (a Module and a data class) and exp.yaml."""
    root = tmp_path_factory.mktemp("cli")
    shutil.copytree(TESTS / "helpers" / "cli_pkg", root / "mypkg", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "exp.yaml").write_text(EXPERIMENT)
    return root


def run(workspace: Path, *args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "trainer"] if module else [shutil.which("trainer") or "trainer"]
    env = {**os.environ, "PYTHONPATH": str(workspace)}
    return subprocess.run([*command, *args], cwd=workspace, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def fits(workspace: Path) -> dict[str, Path]:
    """`trainer fit` in each precision, with an override (max_epochs 1 -> 2)."""
    runs = {}
    for precision in ("fp32", "amp", "bf16"):
        done = run(workspace, "fit", "exp.yaml", "--trainer.precision", precision, "--trainer.max_epochs", "2",
                   f"--trainer.root_dir=runs_{precision}")
        assert done.returncode == 0, done.stderr
        runs[precision] = workspace / f"runs_{precision}" / "default" / "version_0"
    return runs


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_fit_writes_events_checkpoint_and_config(fits: dict[str, Path], precision: str) -> None:
    run_dir = fits[precision]
    assert list(run_dir.glob("events.out.tfevents*"))
    checkpoint = torch.load(run_dir / "last.ckpt", weights_only=True)
    assert checkpoint["loop"]["global_step"] == 8  # 2 epochs (the override) x 4 batches
    assert checkpoint["experiment"]["trainer"]["precision"] == precision
    assert checkpoint["experiment"]["trainer"]["max_epochs"] == 2
    assert checkpoint["experiment"]["model"]["init_args"]["lr"] == 0.1  # YAML 1e-1 became a float
    assert (run_dir / "config.yaml").read_text().startswith("seed: 3\n")
    if precision == "amp":
        assert checkpoint["precision"]["state"]  # the GradScaler's state


def expected_loss(checkpoint: Path) -> float:
    """The epoch-averaged loss computed by hand from the checkpoint's weights."""
    sys.path.insert(0, str(checkpoint.parents[3]))
    try:
        from mypkg.data import RandomData
        from mypkg.models import TinyClassifier
    finally:
        sys.path.pop(0)
    model = TinyClassifier(hidden=6)
    model.load_state_dict(torch.load(checkpoint, weights_only=True)["module"])
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in RandomData(batch_size=8).val_dataloader():
            total += F.cross_entropy(model(x), y).item() * len(y)
            count += len(y)
    return total / count


def test_validate_test_predict_from_checkpoint(workspace: Path, fits: dict[str, Path]) -> None:
    checkpoint = fits["fp32"] / "last.ckpt"
    expected = expected_loss(checkpoint)
    for stage, key in (("validate", "val/loss"), ("test", "test/loss")):
        done = run(workspace, stage, "exp.yaml", "--ckpt_path", str(checkpoint), "--logger", "false")
        assert done.returncode == 0, done.stderr
        metrics = json.loads(done.stdout.strip().splitlines()[-1])
        assert metrics[key] == pytest.approx(expected, rel=1e-5)
    done = run(workspace, "predict", "exp.yaml", "--ckpt_path", str(checkpoint), "--logger", "false", "--output", "p.pt")
    assert done.returncode == 0, done.stderr
    predictions = torch.load(workspace / "p.pt", weights_only=True)
    assert len(predictions) == 4 and predictions[0].shape == (8,)


def test_print_config_round_trips_to_the_same_run(workspace: Path, fits: dict[str, Path]) -> None:
    printed = run(workspace, "fit", "exp.yaml", "--trainer.max_epochs", "2", "--trainer.root_dir", "runs_rt", "--print_config")
    assert printed.returncode == 0, printed.stderr
    assert "max_steps: null" in printed.stdout and "gradient_clip_algorithm: norm" in printed.stdout  # defaults filled
    (workspace / "resolved.yaml").write_text(printed.stdout)
    assert not (workspace / "runs_rt").exists()  # printing builds and writes nothing
    done = run(workspace, "fit", "resolved.yaml")
    assert done.returncode == 0, done.stderr
    again = torch.load(workspace / "runs_rt/default/version_0/last.ckpt", weights_only=True)
    first = torch.load(fits["fp32"] / "last.ckpt", weights_only=True)
    for name, value in first["module"].items():
        assert torch.equal(value, again["module"][name]), name


def test_dry_run_builds_runs_two_steps_and_writes_nothing(workspace: Path) -> None:
    done = run(workspace, "fit", "exp.yaml", "--dry_run", "--trainer.root_dir", "runs_dry", "--trainer.max_epochs", "9", module=True)
    assert done.returncode == 0, done.stderr
    assert "after 2 optimizer steps" in done.stderr and "val/loss" in done.stdout
    assert not (workspace / "runs_dry").exists()


def test_bug_in_user_code_keeps_its_traceback(workspace: Path) -> None:
    done = run(workspace, "fit", "exp.yaml", "--model.class_path", "mypkg.models.Buggy", "--trainer.root_dir", "runs_bug")
    assert done.returncode not in (0, 2)
    assert "Traceback" in done.stderr and "RuntimeError: bug in user code" in done.stderr


def test_three_mistakes_end_to_end(workspace: Path) -> None:
    (workspace / "three.yaml").write_text(EXPERIMENT.replace("max_epochs", "max_epocs").replace("hidden: 6", "hiden: 6")
                                          + "  precision: fp16\n")
    done = run(workspace, "fit", "three.yaml")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "three.yaml has 3 problems" in done.stderr
    for name in ("trainer.max_epocs", "model.init_args.hiden", "trainer.precision"):
        assert name in done.stderr
    missing = run(workspace, "test", "nowhere.yaml", module=True)
    assert missing.returncode == 2 and "nowhere.yaml" in missing.stderr and "Traceback" not in missing.stderr


def test_help_on_root_and_every_command(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done = run(workspace, "--help")
    assert done.returncode == 0 and all(command in done.stdout for command in COMMANDS)
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        shown = capsys.readouterr().out
        assert "--ckpt_path" in shown and "--trainer.max_epochs" in shown and "--dry_run" in shown


# ------------------------------------------------------------ each kind of mistake, in-process
MISTAKES: list[tuple[str, list[str], str]] = [
    ("missing file", ["fit", "{ws}/absent.yaml"], "absent.yaml"),
    ("non-YAML file", ["fit", "{ws}/mypkg/models.py"], "is not valid YAML"),
    ("unknown top-level key", ["fit", "{ws}/exp.yaml", "--trainr.max_epochs", "2"], "Did you mean 'trainer'?"),
    ("misspelled trainer field", ["fit", "{ws}/exp.yaml", "--trainer.max_epoch", "2"], "trainer.max_epoch: unknown field. Did you mean 'max_epochs'?"),
    ("unknown precision", ["fit", "{ws}/exp.yaml", "--trainer.precision", "fp8"], "trainer.precision"),
    ("misspelled model argument", ["fit", "{ws}/exp.yaml", "--model.init_args.hiden", "3"], "model.init_args.hiden: unknown argument"),
    ("wrong type", ["fit", "{ws}/exp.yaml", "--model.init_args.hidden", "wide"], "model.init_args.hidden"),
    ("unimportable class", ["fit", "{ws}/exp.yaml", "--data.class_path", "mypkg.datas.RandomData"], "Did you mean 'data'?"),
    ("missing checkpoint", ["validate", "{ws}/exp.yaml", "--ckpt_path", "{ws}/none.ckpt"], "none.ckpt"),
    ("override without a value", ["fit", "{ws}/exp.yaml", "--trainer.max_epochs", "--dry_run"],
     "--trainer.max_epochs: Expected a value after it"),
    ("output in a missing folder", ["predict", "{ws}/exp.yaml", "--output", "{ws}/nowhere/p.pt"], "--output"),
    ("output is a folder", ["predict", "{ws}/exp.yaml", "--output", "{ws}/mypkg"], "is a folder"),
]


@pytest.mark.parametrize(("kind", "argv", "expected"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_user_mistake_exits_2_with_the_name(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str, argv: list[str], expected: str
) -> None:
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    code = main([a.format(ws=workspace) for a in argv])  # an escaping exception would be a traceback
    error = capsys.readouterr().err
    assert code == 2, error
    assert expected in error and "Traceback" not in error
    if kind == "wrong type":
        assert "'wide'" in error and "valid integer" in error  # the bad value and what is accepted


def test_yaml_parsing_of_override_values(workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.syspath_prepend(str(workspace))
    code = main(["fit", str(workspace / "exp.yaml"), "--print_config", "--model.init_args.lr", "1e-4",
                 "--trainer.gradient_clip_val=null", "--seed", "5"])
    out = capsys.readouterr().out
    assert code == 0
    assert "lr: 0.0001" in out and "gradient_clip_val: null" in out and out.startswith("seed: 5")


def test_under_torchrun_only_rank_zero_prints(workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.syspath_prepend(str(workspace))
    argv = ["validate", str(workspace / "exp.yaml"), "--logger", "false"]
    assert main(argv) == 0
    assert "val/loss" in json.loads(capsys.readouterr().out)
    monkeypatch.setattr(Strategy, "rank", 1)  # what a second torchrun process sees
    assert main(argv) == 0
    assert capsys.readouterr().out == ""


def test_predictions_of_several_ranks_go_to_one_file_each(workspace: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    assert prediction_path("out/p.pt", rank=0, world_size=1) == Path("out/p.pt")
    assert prediction_path("out/p.pt", rank=1, world_size=2) == Path("out/p.rank1.pt")  # no two ranks write one file
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    caplog.set_level("INFO", logger="trainer")
    assert main(["predict", "exp.yaml", "--dry_run", "--output", "dry.pt"]) == 0
    assert not (workspace / "dry.pt").exists() and "saved" not in caplog.text  # a dry run writes nothing


# --------------------------------------------- errors found before anything is written
EARLY: list[tuple[str, list[str], str]] = [
    ("model __init__ raises", ["--model.init_args.hidden", "-1"], "model.init_args: mypkg.models.TinyClassifier(**init_args) raised RuntimeError"),
    ("seed overflow", ["--seed", str(2**70)], "seed"),
    ("trainer seed overflow", ["--trainer.seed", str(2**70)], "trainer.seed"),
    ("root_dir under a file", ["--trainer.root_dir", "{ws}/exp.yaml/runs"], "is a file"),
    ("top-k without a monitor", ["--callbacks", "[{class_path: callbacks.ModelCheckpoint, init_args: {save_top_k: 3}}]"], "callbacks.0.init_args"),
    ("ckpt_path not a checkpoint", ["--ckpt_path", "{ws}/exp.yaml"], "is not a torch.save archive"),
    ("activation checkpointing of a class the model lacks", ["--trainer.activation_checkpointing", "[NoSuchBlock]"],
     "trainer.activation_checkpointing: Trainer(activation_checkpointing=['NoSuchBlock']): TinyClassifier has no "
     "submodule of class NoSuchBlock"),
    ("activation checkpointing of a misspelt class", ["--trainer.activation_checkpointing", "[Encodr]"],
     "Did you mean 'Encoder' for 'Encodr'?"),
    ("activation checkpointing of a misspelt import path", ["--trainer.activation_checkpointing", "[mypkg.models.Encodr]"],
     "Did you mean 'Encoder' for 'mypkg.models.Encodr'?"),
]
if not torch.cuda.is_available():
    EARLY.append(("unavailable device", ["--trainer.device", "cuda"], "no CUDA device is available here"))


@pytest.mark.parametrize(("kind", "extra", "expected"), EARLY, ids=[m[0] for m in EARLY])
def test_errors_before_work_exit_2_and_write_nothing(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kind: str, extra: list[str], expected: str,
) -> None:
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    root = tmp_path / "runs"
    argv = ["fit", str(workspace / "exp.yaml"), "--trainer.root_dir", str(root), *[a.replace("{ws}", str(workspace)) for a in extra]]
    code = main(argv)
    error = capsys.readouterr().err
    assert code == 2, error
    assert expected in error and "Traceback" not in error
    assert not root.exists()  # no run folder, no config.yaml


def test_the_same_fit_command_starts_its_run_then_continues_it(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """`--ckpt_path last` on a first launch starts fresh with a note; run again, it resumes in the same folder."""
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    caplog.set_level("INFO", logger="trainer")
    root = tmp_path / "runs"
    argv = ["fit", str(workspace / "exp.yaml"), "--trainer.root_dir", str(root), "--trainer.run_name", "exp1", "--ckpt_path", "last"]
    assert main(argv) == 0
    assert "run " in caplog.text and "has no checkpoint yet, so the run starts from the beginning" in caplog.text
    last = root / "default" / "exp1" / "last.ckpt"
    assert torch.load(last, weights_only=True)["loop"]["global_step"] == 4
    caplog.clear()
    assert main([*argv, "--trainer.max_epochs", "2"]) == 0  # the same command, allowed one more epoch
    assert f"Resumed from {last}: epoch 1, optimizer step 4" in caplog.text
    assert torch.load(last, weights_only=True)["loop"]["global_step"] == 8
    assert [p.name for p in (root / "default").iterdir()] == ["exp1"]  # no new version folder


def test_lightning_cli_shorthand_and_hints(workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """`--model.hidden 256` means `--model.init_args.hidden 256` (LightningCLI);
    validate without --ckpt_path says it scores untrained weights."""
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    code = main(["fit", str(workspace / "exp.yaml"), "--print_config", "--model.hidden", "11"])
    assert code == 0 and "hidden: 11" in capsys.readouterr().out
    with caplog.at_level("WARNING", logger="trainer"):
        code = main(["validate", str(workspace / "exp.yaml"), "--trainer.root_dir", str(tmp_path), "--logger", "false"])
    assert code == 0 and "untrained weights" in caplog.text


def test_dry_run_validates_the_real_config_first(workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """`--dry_run` used to pass a config whose real run fails (max_epochs: -3)."""
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    assert main(["fit", str(workspace / "exp.yaml"), "--dry_run", "--trainer.max_epochs", "-3"]) == 2
    assert "max_epochs" in capsys.readouterr().err


def test_several_config_files_and_model_help(workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """LightningCLI: later config files override earlier ones; --model.help lists
    the model class's arguments."""
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    (workspace / "wide.yaml").write_text("model:\n  init_args: {hidden: 21}\ntrainer: {max_epochs: 4}\n")
    assert main(["fit", str(workspace / "exp.yaml"), str(workspace / "wide.yaml"), "--print_config"]) == 0
    out = capsys.readouterr().out
    assert "hidden: 21" in out and "max_epochs: 4" in out and "lr: 0.1" in out  # merged key by key
    assert main(["fit", str(workspace / "exp.yaml"), "--model.help"]) == 0
    out = capsys.readouterr().out
    assert "model: mypkg.models.TinyClassifier" in out and "--model.init_args.hidden: int = 8" in out


def test_a_bad_override_is_blamed_on_the_command_line(workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """A mistake made on the command line says so, instead of blaming the YAML file."""
    monkeypatch.syspath_prepend(str(workspace))
    monkeypatch.chdir(workspace)
    assert main(["fit", str(workspace / "exp.yaml"), "--trainer.max_epochs", "-3"]) == 2
    error = capsys.readouterr().err
    assert "trainer.max_epochs" in error and "(set on the command line: --trainer.max_epochs -3)" in error
