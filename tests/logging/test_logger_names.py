"""Folder loggers' `name` as Lightning takes it: any string, `/` making nested folders
("csv/", "exp/run"), None or "" no sub-folder; the run folder (relative to `save_dir`) and
the files in it are where Lightning's loggers put them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from trainer.loggers import CSVLogger, TensorBoardLogger

pytest.importorskip("lightning")
from lightning.pytorch import loggers as their_loggers  # noqa: E402

NAMES = ["csv/", "exp/run1", "exp/run1/", "plain", "", None, "./here"]


def _written(logger: Any, root: Path) -> tuple[str, list[str]]:
    """The run folder relative to `root`, and the files written there after one metric."""
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.log_hyperparams({"lr": 0.1})
    if hasattr(logger, "save"):
        logger.save()
    logger.finalize("success") if hasattr(logger, "finalize") else logger.close()
    folder = Path(logger.log_dir)
    files = sorted(path.name for path in folder.iterdir() if not path.name.startswith("events.out"))
    return os.path.relpath(folder.resolve(), root.resolve()), files


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["CSVLogger", "TensorBoardLogger"])
def test_a_logger_name_puts_the_run_where_lightnings_does(kind: str, name: str | None, tmp_path: Path) -> None:
    ours_root, theirs_root = tmp_path / "ours", tmp_path / "theirs"
    ours = {"CSVLogger": CSVLogger, "TensorBoardLogger": TensorBoardLogger}[kind](save_dir=ours_root, name=name)
    theirs = getattr(their_loggers, kind)(save_dir=theirs_root, name=name)
    (folder, files), (their_folder, their_files) = _written(ours, ours_root), _written(theirs, theirs_root)
    assert folder == their_folder
    if kind == "CSVLogger":  # (TensorBoard's files are event files with their own names)
        assert files == their_files == ["hparams.yaml", "metrics.csv"]
    assert ours.name == theirs.name
    again = {"CSVLogger": CSVLogger, "TensorBoardLogger": TensorBoardLogger}[kind](save_dir=ours_root, name=name)
    assert Path(again.log_dir).name == "version_1"  # the next run of that experiment, as Lightning's
