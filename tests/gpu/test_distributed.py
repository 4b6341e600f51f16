"""DDP and FSDP (also with cpu_offload) on NCCL, one process under torchrun: fit, a mid-epoch
save, a resume that ends on the uninterrupted run's weights, and a clean exit (return code 0,
the process group released, no NCCL warning)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gpu._references import GPU

pytestmark = GPU
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parent / "_nccl_worker.py"


def torchrun(phase: str, out: Path, nproc: int = 1) -> Any:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), CUBLAS_WORKSPACE_CONFIG=":4096:8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(WORKER), phase, str(out)]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
    assert "destroy_process_group" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-4000:]
    if nproc == 1:
        return torch.load(out / f"{phase}.pt", weights_only=False)
    return [torch.load(out / f"{phase}_rank{rank}.pt", weights_only=False) for rank in range(nproc)]


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


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("phase", ["ddp", "fsdp"])
def test_two_gpus_over_nccl_agree_save_and_resume(tmp_path, phase):
    """One process per GPU: each rank on its own GPU, the same weights on both, and a resume from
    the mid-epoch save that ends on the uninterrupted run's weights."""
    zero_results, one_results = torchrun(phase, tmp_path, nproc=2)
    for precision, zero in zero_results.items():
        one = one_results[precision]
        assert zero["world_size"] == one["world_size"] == 2
        assert zero["equal"] and one["equal"], (phase, precision)
        assert zero["global_step"] == one["global_step"] == zero["resumed_step"] == one["resumed_step"] > 4  # past the save
        assert [zero["device"], one["device"]] == ["cuda:0", "cuda:1"] and [zero["current"], one["current"]] == [0, 1]
        assert [zero["module_device"], one["module_device"]] == ["cuda:0", "cuda:1"]
        assert all(torch.equal(zero["weights"][k], one["weights"][k]) for k in zero["weights"]), (phase, precision)
