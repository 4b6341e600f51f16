"""`Trainer(compile=True)`: the compiler's cache is saved beside last.ckpt and loaded by a
resumed process, so a requeued job on a fresh node (an empty `TORCHINDUCTOR_CACHE_DIR`) finds
its graphs instead of compiling them again; a learning-rate scheduler causes no recompile;
what compiling cost is logged; a sidecar that is damaged or writable by others is not loaded."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.launch import ROOT
from trainer.core.compile_cache import SIDECAR, read_sidecar, write_sidecar

WORKER = ROOT / "tests" / "helpers" / "scripts" / "compile_cache_worker.py"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor on a CPU needs a C++ compiler")


def test_a_resumed_process_with_an_empty_compiler_cache_hits_the_runs_cache_and_trains_the_same(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Both runs in processes of their own: Inductor's cache keys hold the process's settings
    # (its thread count, ...), which other tests in this process may have changed.
    root = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    def first_run(steps: int, folder: Path) -> dict[str, Any]:
        done = subprocess.run([sys.executable, str(WORKER), "first", str(folder), str(tmp_path), str(steps)],
                              cwd=tmp_path, env={**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor{steps}")},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads((tmp_path / f"first{steps}.json").read_text())

    first = first_run(3, root)
    # one graph for the whole fit: the scheduler changes the learning rate every step, no recompile
    assert first["frames"] == 1
    assert any(line.startswith("compile: 1 graph(s), 0 recompile(s), 0 graph break(s)") for line in first["lines"]), \
        first["lines"]
    run = root / "default" / "job"
    assert (run / SIDECAR).is_file()

    fresh = tmp_path / "inductor"  # a node that never compiled anything
    done = subprocess.run([sys.executable, str(WORKER), str(run / "last.ckpt"), str(root), str(tmp_path)],
                          cwd=tmp_path, env={**env, "TORCHINDUCTOR_CACHE_DIR": str(fresh)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed["fxgraph_cache_hit"] >= 2 and resumed["fxgraph_cache_miss"] == 0, resumed  # forward and backward
    assert resumed["autograd_cache_hit"] >= 1, resumed
    assert any(line.startswith("compile cache: loaded") for line in resumed["lines"]), resumed["lines"]

    first_run(6, tmp_path / "reference")  # the uninterrupted run, in a process of its own too
    reference = torch.load(tmp_path / "first6.pt", weights_only=True)
    weights = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert reference.keys() == weights.keys() and all(torch.equal(weights[k], v) for k, v in reference.items())


def test_a_damaged_or_foreign_writable_sidecar_is_not_loaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_sidecar(tmp_path, b"artifacts")
    assert read_sidecar(path) == b"artifacts"
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o666)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert read_sidecar(path) is None
    assert "writable by others" in caplog.text
    path.chmod(0o600)
    path.write_bytes(path.read_bytes()[:-1] + b"X")
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert read_sidecar(path) is None
    assert "damaged (its CRC32 or size does not match)" in caplog.text
