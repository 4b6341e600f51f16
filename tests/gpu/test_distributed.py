"""DDP and FSDP (also with cpu_offload) on NCCL, one process under torchrun: fit, a mid-epoch
save, a resume that ends on the uninterrupted run's weights, and a clean exit (return code 0,
the process group released, no NCCL warning)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.gpu._references import GPU

pytestmark = GPU
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parent / "_nccl_worker.py"


def torchrun(phase: str, out: Path) -> dict[str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), CUBLAS_WORKSPACE_CONFIG=":4096:8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", str(WORKER), phase, str(out)]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
    assert "destroy_process_group" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-4000:]
    return torch.load(out / f"{phase}.pt", weights_only=False)


@pytest.mark.parametrize("phase", ["ddp", "fsdp", "fsdp_offload"])
def test_nccl_fit_save_resume_and_clean_exit(tmp_path, phase):
    results = torchrun(phase, tmp_path)
    for precision, info in results.items():
        assert info["equal"], (phase, precision)
        assert info["global_step"] == info["resumed_step"] == 20
        assert info["device"] == "cuda:0" and info["current"] == 0 and info["module_device"] == "cuda:0"
        if phase == "fsdp_offload":  # offloaded gradients are reduced over Gloo, the rest over NCCL
            assert "cpu:gloo" in info["backend"] and "cuda:nccl" in info["backend"], info["backend"]
        else:
            assert "nccl" in info["backend"] and "gloo" not in info["backend"], info["backend"]
