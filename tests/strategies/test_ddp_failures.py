"""A failing rank ends the whole job within seconds, never a 30-minute hang; uneven inputs
either work (loaders without len()) or fail clearly on every rank. 2 CPU
processes on Gloo under torchrun; each scenario is bounded by a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "failure_worker.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")


def torchrun(mode: str, who: int, out: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), mode, str(who), str(out)]
    start = time.monotonic()
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start


@pytest.mark.parametrize(("mode", "who"), [("raise", 1), ("raise", 0), ("nan", 1), ("kill", 1)])
def test_a_failing_rank_ends_the_job(tmp_path: Path, mode: str, who: int):
    done, seconds = torchrun(mode, who, tmp_path)
    assert done.returncode != 0
    assert seconds < 60, f"took {seconds:.0f} s"  # it hung until Gloo's 30-minute timeout before
    if mode == "raise":
        assert f"boom on rank {who}" in done.stderr  # that rank's traceback is shown
    if mode == "nan":
        assert "non-finite loss" in done.stderr
    assert not list(tmp_path.glob("rank*.pt"))


def test_uneven_known_lengths_fail_clearly_on_every_rank(tmp_path: Path):
    done, seconds = torchrun("uneven-list", 0, tmp_path)
    assert done.returncode != 0 and seconds < 60
    assert "rank 0: 5, rank 1: 4" in done.stderr
    assert done.stderr.count("different number of batches on each rank") >= 2  # both ranks say it


def test_uneven_iterables_end_the_epoch_together(tmp_path: Path):
    done, _ = torchrun("uneven-iterable", 0, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert rank0["global_step"] == rank1["global_step"] == 8  # 4 steps per epoch: the shorter rank's
    assert all(torch.equal(rank0["weights"][k], rank1["weights"][k]) for k in rank0["weights"])
    assert "ran out of training batches" in done.stderr
