"""A resume under DDP checks the checkpoint's checksum (a full read of the file) once, not once
per rank: with ckpt_path="last" on rank 0 (the other ranks load the file it chose), with a path
on each machine's local rank 0; the others read only what they use. A damaged file still fails
every rank. Runs tests/helpers/scripts/resume_read_worker.py under torchrun (2 Gloo processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_one_rank_checks_the_checksum_on_resume_and_a_damaged_file_fails_every_rank(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    worker = ROOT / "tests" / "helpers" / "scripts" / "resume_read_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    zero, one = (torch.load(tmp_path / f"reads_rank{r}.pt", weights_only=False) for r in range(2))
    for rank in (zero, one):
        assert rank["first_step"] > 0 and rank["second_step"] == rank["third_step"] == 2 * rank["first_step"]  # resumed
    assert [zero["local_rank"], one["local_rank"]] == [0, 1]
    assert zero["verified_last"].count("last.ckpt") == 1, zero["verified_last"]  # rank 0 checked the file it chose
    assert one["verified_last"] == [], one["verified_last"]  # and rank 1 did not read it all again
    assert zero["verified_path"] == ["last.ckpt"] and one["verified_path"] == [], (zero["verified_path"], one["verified_path"])
    for key in zero["weights"]:
        assert torch.equal(zero["weights"][key], one["weights"][key]) and torch.equal(zero["path_weights"][key], one["path_weights"][key])
        assert torch.equal(zero["weights"][key], zero["path_weights"][key])  # 'last' and the path: the same resume
    assert zero["refused"].startswith("CheckpointError") and "damaged.ckpt" in zero["refused"], zero["refused"]
    assert one["refused"].startswith("CheckpointError") and "another rank" in one["refused"], one["refused"]
