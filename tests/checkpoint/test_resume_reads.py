"""A resume with ckpt_path="last" under DDP checks the checkpoint's checksum (a full read of the
file) on rank 0 only; the other ranks load the file rank 0 chose and checked, reading only what
they use. Runs tests/helpers/scripts/resume_read_worker.py under torchrun (2 Gloo processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_only_rank_zero_checks_the_checksum_when_resuming_last(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    worker = ROOT / "tests" / "helpers" / "scripts" / "resume_read_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    zero, one = (torch.load(tmp_path / f"reads_rank{r}.pt", weights_only=False) for r in range(2))
    for rank in (zero, one):
        assert rank["first_step"] > 0 and rank["second_step"] == 2 * rank["first_step"]  # resumed, not restarted
    assert zero["verified"].count("last.ckpt") == 1, zero["verified"]  # rank 0 checked the file it chose
    assert one["verified"] == [], one["verified"]  # and rank 1 did not read it all again
    assert all(torch.equal(zero["weights"][k], one["weights"][k]) for k in zero["weights"])
