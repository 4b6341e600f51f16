"""A `training_step` that returns None under DDP: on every rank for the same batch it is a
skip, as in one process; on some ranks only, the ranks that return a loss would wait in DDP's
all-reduce forever, so the skipping rank ends the job with an error that says what happened."""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers.launch import ROOT, run_torchrun

WORKER = ROOT / "tests" / "helpers" / "scripts" / "skip_worker.py"


def torchrun(out: Path, who: str) -> tuple[int, str, float]:
    started = time.monotonic()
    done = run_torchrun(WORKER, str(out), who, cwd=out)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_every_rank_skipping_the_same_batch_goes_on(tmp_path: Path) -> None:
    code, output, _ = torchrun(tmp_path, "all")
    assert code == 0, output[-4000:]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)] == ["5", "5"]


def test_one_rank_skipping_ends_the_job_with_an_error_naming_it(tmp_path: Path) -> None:
    code, output, took = torchrun(tmp_path, "one")
    assert code != 0
    assert "training_step returned None for batch 2 on rank 1 of 2, but not on every rank" in output, output[-4000:]
    assert took < 120  # not the backend's 30 minutes
