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

import pytest
import torch

from tests.helpers.launch import ROOT
from tests.helpers.scripts.compile_cache_worker import Linear, loader, trainer
from trainer.core.compile_cache import SIDECAR, read_sidecar, write_sidecar

WORKER = ROOT / "tests" / "helpers" / "scripts" / "compile_cache_worker.py"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="Inductor on a CPU needs a C++ compiler")


def test_a_resumed_process_with_an_empty_compiler_cache_hits_the_runs_cache_and_trains_the_same(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from torch._dynamo.utils import counters

    # Dynamo keeps the compiled frames of the process, keyed by code object: the Trainer's
    # module call is one frame for every module (as nn.Module.compile's is), so a module of
    # another class compiled earlier in this process would make this fit's first compile a
    # recompile of that frame. Start from an empty dynamo cache.
    torch._dynamo.reset()
    root = tmp_path / "runs"
    frames = counters["frames"]["ok"]
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="trainer"):
        first = trainer(max_steps=3, root_dir=root, run_name="job")
        first.fit(Linear(), loader())
    # one graph for the whole fit: the scheduler changes the learning rate every step, no recompile
    assert counters["frames"]["ok"] - frames == 1
    assert any(line.startswith("compile: 1 graph(s), 0 recompile(s), 0 graph break(s)") for line in caplog.messages), \
        caplog.messages
    run = root / "default" / "job"
    assert (run / SIDECAR).is_file()

    fresh = tmp_path / "inductor"  # a node that never compiled anything
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(fresh), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(WORKER), str(run / "last.ckpt"), str(root), str(tmp_path),
                           str(torch.get_num_threads())],  # the thread count is part of the cache keys
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed["fxgraph_cache_hit"] >= 2 and resumed["fxgraph_cache_miss"] == 0, resumed  # forward and backward
    assert resumed["autograd_cache_hit"] >= 1, resumed
    assert any(line.startswith("compile cache: loaded") for line in resumed["lines"]), resumed["lines"]

    torch.manual_seed(0)
    reference = Linear()
    trainer(max_steps=6, enable_checkpointing=False, root_dir=tmp_path / "reference").fit(reference, loader())
    weights = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert all(torch.equal(weights[k], v) for k, v in reference.state_dict().items())


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
