"""A resumed run continues in its own folder whatever the logger and whatever user code reads.

- A `setup` hook (or any hook before the restore) that reads `trainer.log_dir` sees the
  resumed run's folder, not a new `version_N`.
- `ckpt_path="last"` continues the run's folder, and falls back past a damaged newest
  checkpoint, the same way with the default logger, a folder logger, MLflow or W&B alone
  (the real libraries, offline: MLflow on a SQLite file in tmp_path, W&B in offline mode).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.checkpoints import fresh_model, scramble_global_rng, shuffled
from tests.helpers.reference import TinyNet, make_data, make_model, weights
from trainer import Trainer
from trainer.loggers import CSVLogger, TensorBoardLogger

LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_DISABLE_GIT": "true",
           "WANDB_DISABLE_CODE": "true"}


@pytest.fixture(autouse=True)
def _plain_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SLURM_") or name in LAUNCH:
            monkeypatch.delenv(name)
    for name, value in {**OFFLINE, "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


class ReadsLogDir(TinyNet):
    """A module whose setup() asks for the run's folder, as code that writes files there does."""

    def setup(self, stage: str) -> None:
        self.seen_in_setup = Path(self.trainer.log_dir)


def _logger(kind: str, root: Path) -> Any:
    if kind == "default":
        return True
    if kind == "tensorboard":
        pytest.importorskip("tensorboard")
        return TensorBoardLogger(root)
    if kind == "csv":
        return CSVLogger(root)
    if kind == "mlflow":
        pytest.importorskip("mlflow")
        from trainer.loggers import MLflowLogger

        return MLflowLogger("runs", tracking_uri=f"sqlite:///{root.parent / 'mlflow.db'}")
    pytest.importorskip("wandb")
    from trainer.loggers import WandbLogger

    return WandbLogger(project="runs", save_dir=root.parent / "wandb-files", mode="offline")


def _fit(root: Path, kind: str, epochs: int, ckpt_path: str | None, model: Any = None, **kwargs: Any) -> Trainer:
    run = Trainer(root_dir=root, max_epochs=epochs, logger=_logger(kind, root), enable_progress_bar=False,
                  device="cpu", **kwargs)
    run.fit(model if model is not None else make_model(lr=0.01), shuffled(make_data()), ckpt_path=ckpt_path)
    return run


@pytest.mark.parametrize("kind", ["default", "tensorboard", "csv", "mlflow"])
@pytest.mark.parametrize("how", ["last", "path"])
def test_a_setup_hook_reading_log_dir_sees_the_resumed_runs_folder(tmp_path: Path, kind: str, how: str) -> None:
    root = tmp_path / "runs"
    torch.manual_seed(1)
    first = _fit(root, kind, 1, None, model=ReadsLogDir(lr=0.01))
    folder = root / "default" / "version_0"
    assert first.log_dir == folder

    scramble_global_rng()
    torch.manual_seed(777)
    model = ReadsLogDir(lr=0.01)
    again = _fit(root, kind, 2, "last" if how == "last" else str(folder / "last.ckpt"), model=model)
    assert model.seen_in_setup == folder  # the hook saw the run's own folder
    assert again.log_dir == folder and again.global_step == 20
    assert sorted(p.name for p in (root / "default").iterdir()) == ["version_0"]  # no split run
    assert torch.load(folder / "last.ckpt", weights_only=True)["loop"]["global_step"] == 20


@pytest.mark.parametrize("kind", ["default", "mlflow", "wandb"])
def test_last_continues_and_falls_back_the_same_whatever_the_logger(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "runs"
    torch.manual_seed(1)
    _fit(root, kind, 1, "last", keep_last_checkpoints=2)
    folder = root / "default" / "version_0"
    scramble_global_rng()
    again = _fit(root, kind, 2, "last", model=fresh_model(lr=0.01), keep_last_checkpoints=2)
    assert again.log_dir == folder and again.global_step == 20
    assert sorted(p.name for p in (root / "default").iterdir()) == ["version_0"]
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["last-step=10.ckpt", "last.ckpt"]

    newest = folder / "last.ckpt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # damaged
    scramble_global_rng()
    model = fresh_model(lr=0.01)
    with pytest.warns(UserWarning, match=r"is damaged .* resuming from the previous complete one, .*last-step=10\.ckpt"):
        third = _fit(root, kind, 3, "last", model=model, keep_last_checkpoints=2)
    assert third.log_dir == folder and third.global_step == 30

    torch.manual_seed(1)
    reference = make_model(lr=0.01)
    Trainer(root_dir=tmp_path / "full", max_epochs=3, logger=False, enable_progress_bar=False, device="cpu").fit(
        reference, shuffled(make_data()))
    expected, got = weights(reference), weights(model)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


SCRIPT = """
import sys, torch
from tests.helpers.checkpoints import shuffled
from tests.helpers.reference import make_data, make_model
from trainer import Trainer
trainer = Trainer(root_dir=sys.argv[1], max_epochs=int(sys.argv[2]), logger=False, enable_progress_bar=False, device="cpu")
trainer.fit(make_model(lr=0.01), shuffled(make_data()), ckpt_path="last")
"""


def test_a_plain_script_says_once_where_it_resumed_from_without_logging_configured(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(epochs: int) -> str:
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "runs"), str(epochs)], capture_output=True,
                              text=True, env=env, timeout=300, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    first = run(1)
    assert "Resumed from" not in first  # the first launch starts fresh
    again = run(2)
    last = tmp_path / "runs" / "default" / "version_0" / "last.ckpt"
    assert again.count("Resumed from") == 1, again
    assert f"Resumed from {last}: epoch 1, optimizer step 10, batch 0 of the epoch." in again


def test_a_finished_run_relaunched_says_how_to_train_further_from_python_and_from_the_command(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.helpers.reference import loader

    Trainer(max_epochs=1, root_dir=str(tmp_path), enable_progress_bar=False).fit(make_model(), loader(make_data(8)))
    with caplog.at_level("WARNING"):
        Trainer(max_epochs=1, root_dir=str(tmp_path), enable_progress_bar=False).fit(make_model(), loader(make_data(8)),
                                                                                      ckpt_path="last")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Nothing to train")]
    assert len(said) == 1 and "ckpt_path=" in said[0]
    assert "--trainer.max_epochs" in said[0] and "--ckpt_path last" in said[0]  # what `trainer fit` takes


@pytest.mark.parametrize("kind", ["default", "csv", "tensorboard", "mlflow"])
def test_log_dir_read_before_a_resuming_fit_does_not_split_the_run(tmp_path: Path, kind: str) -> None:
    """A script printing `trainer.log_dir` before `fit(ckpt_path="last")` gets a new version_N (the run
    is not known to resume yet); nothing written there, the resume gives it back and continues its run."""
    root = tmp_path / "runs"
    torch.manual_seed(1)
    _fit(root, kind, 1, "last", model=ReadsLogDir(lr=0.01))
    folder = root / "default" / "version_0"
    for epochs in (2, 3):  # twice: each rerun continues the same folder
        run = Trainer(root_dir=root, max_epochs=epochs, logger=_logger(kind, root), enable_progress_bar=False,
                      device="cpu")
        assert run.log_dir == root / "default" / "version_1"  # what the read said before fit
        model = ReadsLogDir(lr=0.01)
        run.fit(model, shuffled(make_data()), ckpt_path="last")
        assert model.seen_in_setup == folder and run.log_dir == folder and run.global_step == 10 * epochs
        assert sorted(p.name for p in (root / "default").iterdir()) == ["version_0"]

    # a file written into the folder the read named is never removed: that run keeps it
    run = Trainer(root_dir=root, max_epochs=4, logger=_logger(kind, root), enable_progress_bar=False, device="cpu")
    (Path(run.log_dir) / "config.txt").write_text("mine")
    run.fit(ReadsLogDir(lr=0.01), shuffled(make_data()), ckpt_path="last")
    assert run.log_dir == root / "default" / "version_1" and (run.log_dir / "config.txt").read_text() == "mine"
    assert run.global_step == 40  # it resumed all the same
