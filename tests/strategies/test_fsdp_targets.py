"""FSDP under amp/bf16 does not cast the batch at its root: a float target keeps float32 and
its value (1 + 2**-12 is not a bfloat16 or float16 number, 1e6 overflows float16), as under
DDP and on one device, where autocast alone decides each op's dtype. 2 Gloo processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "helpers" / "scripts" / "fsdp_targets_worker.py"


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_float_targets_keep_their_dtype_and_value_under_fsdp_mixed_precision(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), str(tmp_path)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    for rank in range(2):
        results = torch.load(tmp_path / f"targets_rank{rank}.pt", weights_only=False)
        for precision in ("bf16", "amp"):
            assert results[precision] == [("torch.float32", "torch.float32", True)] * 2, (rank, precision)
