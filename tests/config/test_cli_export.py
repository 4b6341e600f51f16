"""`trainer export CHECKPOINT OUTPUT` with a CHECKPOINT that is not there: the error is the
command's own (what it takes, and the run checkpoints there are), not advice for `fit`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from trainer.config.cli import main


def test_a_missing_checkpoint_says_what_export_takes_and_names_the_newest_run_checkpoint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for age, version in ((100, "version_1"), (200, "version_0")):  # version_1 is the newer
        (tmp_path / "runs" / "default" / version).mkdir(parents=True)
        (tmp_path / "runs" / "default" / version / "last.ckpt").write_bytes(b"")
        os.utime(tmp_path / "runs" / "default" / version / "last.ckpt", (time.time() - age,) * 2)
    newest = Path("runs/default/version_1/last.ckpt")
    assert main(["export", "last.ckpt", "weights.pt"]) == 2
    err = capsys.readouterr().err
    assert "the command line has 1 problem" in err and "CHECKPOINT" in err and "'last.ckpt' does not exist" in err
    assert "ckpt_path" not in err  # export takes no ckpt_path: no advice about resuming
    assert f"trainer export {newest} weights.pt" in err
    assert not (tmp_path / "weights.pt").exists()


def test_with_no_runs_around_it_says_what_a_checkpoint_path_looks_like(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["export", "last.ckpt", "weights.pt"]) == 2
    err = capsys.readouterr().err
    assert "'last.ckpt' does not exist" in err and "ckpt_path" not in err and "runs/" in err
