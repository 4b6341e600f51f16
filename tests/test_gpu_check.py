"""benchmarks/gpu_check.sh on a machine without a GPU: the environment and install steps run
(offline), then it stops with "no GPU" and exit status 3, having written its summary."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would run the suite")
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_gpu_check_stops_cleanly_without_a_gpu(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_CHECK_NO_PIP="1", TMPDIR=str(tmp_path))
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    summary = (tmp_path / "out" / "00_summary.txt").read_text()
    assert "[env] ok" in summary and "[install] ok" in summary and "STOP: no GPU" in summary, summary
    assert "imports ok: trainer from" in (tmp_path / "out" / "02_install.log").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("gpu-check.")]  # its scratch folder removed
