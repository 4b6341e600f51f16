"""Manual optimization under 2-process DDP (Gloo): the GAN's weights equal a hand-written loop
that all-reduces each backward's gradients, on both ranks, in fp32 and amp, with DDP's sync
skipped on accumulating backward passes (`opt.toggle_model(sync_grad=False)`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parents[1] / "helpers" / "scripts" / "manual_worker.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ddp_manual")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), str(out)]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [torch.load(out / f"manual_rank{r}.pt", weights_only=False) for r in (0, 1)]


@pytest.mark.parametrize("case", ["fp32", "amp-overflow", "fp32-accumulate"])
def test_manual_gan_under_ddp_equals_the_hand_written_loop(ranks, case):
    for result in ranks:
        run = result[case]
        for key, value in run["trainer"].items():
            assert torch.equal(value, run["hand"][key]), f"{case}: {key}"
    first, second = (r[case]["trainer"] for r in ranks)
    assert all(torch.equal(first[k], second[k]) for k in first)  # the ranks agree


def test_counts_under_ddp(ranks):
    for result in ranks:
        assert result["fp32"]["global_step"] == 2 * 6 * 2  # two optimizers, 6 batches, 2 epochs
        assert result["fp32-accumulate"]["global_step"] == 2 * (6 + 3)
        assert result["amp-overflow"]["skipped"] == 1  # the overflow on rank 0 reaches rank 1 through the all-reduce
