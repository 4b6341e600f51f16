"""DDP and FSDP (two processes, Gloo on CPU): a resume inside an epoch whose epoch-start hooks reset the
module's buffer state and the optimizer's and scheduler's states ends with the uninterrupted
run's weights and buffers on every rank (the checkpoint's restore runs again after the hooks,
through the DDP-wrapped module, from FSDP's sharded checkpoint folder). The worker is tests/helpers/scripts/epoch_start_worker.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "scripts" / "epoch_start_worker.py"


def torchrun(phase: str, out: Path, strategy: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), phase, str(out), strategy]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"torchrun {phase} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_mid_epoch_resume_wins_over_the_epoch_start_hooks(strategy: str, tmp_path: Path) -> None:
    torchrun("main", tmp_path, strategy)
    torchrun("resume", tmp_path, strategy)
    for rank in (0, 1):
        main = torch.load(tmp_path / f"main_rank{rank}.pt", weights_only=False)
        resumed = torch.load(tmp_path / f"resume_rank{rank}.pt", weights_only=False)["resumed"]
        assert main["cut"]["epoch"] == 1 and main["cut"]["batches_done"] > 0  # inside the second epoch
        different = [key for key in main["whole"] if not torch.equal(main["whole"][key], resumed[key])]
        assert not different, f"rank {rank}: {different} differ from the uninterrupted run"
