"""`Trainer(compile=...)`: the module is compiled in place, the weights equal a
hand-written loop that compiles the same model the same way, and checkpoints move between
compiled and eager runs (no `_orig_mod.` prefixes). Inductor on CPU needs a C compiler."""

from __future__ import annotations

import contextlib
import copy
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data
from trainer import Trainer

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="inductor needs a C compiler")

QUIET = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=0, device="cpu")


class Net(TinyNet):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x).float(), y)  # through forward: what compile covers


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_compiled_run_equals_a_hand_written_compiled_loop(precision):
    torch.manual_seed(0)
    model = Net(dropout=0.0)
    reference = copy.deepcopy(model)
    data = make_data()
    Trainer(max_epochs=1, precision=precision, compile=True, **QUIET).fit(model, loader(data, shuffle=False))
    reference.compile()
    opt = reference.configure_optimizers()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    for i, batch in enumerate(loader(data, shuffle=False)):
        with autocast:
            loss = reference.training_step(batch, i)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert_same_weights(model, reference)


def test_checkpoints_move_between_compiled_and_eager_runs(tmp_path: Path):
    torch.manual_seed(0)
    eager = Net(dropout=0.0)
    compiled = copy.deepcopy(eager)
    first = Trainer(max_steps=4, root_dir=tmp_path, logger=False, enable_progress_bar=False, compile={"mode": "default"}, device="cpu")
    first.fit(compiled, loader(make_data(), shuffle=False))
    state = torch.load(first.log_dir / "last.ckpt", weights_only=True)
    assert not any("_orig_mod" in key for key in state["module"])
    second = Trainer(max_steps=8, **QUIET)
    second.fit(eager, loader(make_data(), shuffle=False), ckpt_path=first.log_dir / "last.ckpt")
    assert second.global_step == 8


def test_unknown_compile_options_are_refused():
    with pytest.raises(ValueError, match="unknown torch.compile option"):
        Trainer(compile={"modes": "max-autotune"})


def _torchrun_compile_worker(out: Path, *extra: str) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    worker = root / "tests" / "helpers" / "scripts" / "compile_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(out), *extra]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]


@pytest.mark.slow
def test_compile_under_fsdp_equals_eager_fsdp(tmp_path: Path):
    """compile=True with strategy=FSDP (2 Gloo processes): the module is compiled before it is
    sharded; the weights equal the eager FSDP run's."""
    _torchrun_compile_worker(tmp_path, "fsdp")
    for rank in range(2):
        result = torch.load(tmp_path / f"fsdp_rank{rank}.pt", weights_only=True)
        for key, value in result["eager"].items():
            assert torch.equal(result["compiled"][key], value), (rank, key)


@pytest.mark.slow
def test_compile_under_ddp_equals_a_compiled_ddp_module(tmp_path: Path):
    """compile=True with strategy='ddp' (2 Gloo processes): the step runs inside DDP's
    forward, so dynamo splits the compiled graph at DDP's buckets exactly as it does for
    `torch.compile(DistributedDataParallel(model))`; the weights are equal."""
    _torchrun_compile_worker(tmp_path)
    for rank in range(2):
        result = torch.load(tmp_path / f"compile_rank{rank}.pt", weights_only=True)
        assert result["steps"] == 8
        for key, value in result["reference"].items():
            assert torch.equal(result["trainer"][key], value), (rank, key)
