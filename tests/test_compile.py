"""`Trainer(compile=...)` (issue 13): the module is compiled in place, the weights equal a
hand-written loop that compiles the same model the same way, and checkpoints move between
compiled and eager runs (no `_orig_mod.` prefixes). Inductor on CPU needs a C compiler."""

from __future__ import annotations

import contextlib
import copy
import shutil
from pathlib import Path

import pytest
import torch

from tests.reference import TinyNet, assert_same_weights, loader, make_data
from trainer import Trainer

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="inductor needs a C compiler")

QUIET = dict(logger=False, enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=0)


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
    first = Trainer(max_steps=4, root_dir=tmp_path, logger=False, enable_progress_bar=False, compile={"mode": "default"})
    first.fit(compiled, loader(make_data(), shuffle=False))
    state = torch.load(first.log_dir / "last.ckpt", weights_only=True)
    assert not any("_orig_mod" in key for key in state["module"])
    second = Trainer(max_steps=8, **QUIET)
    second.fit(eager, loader(make_data(), shuffle=False), ckpt_path=first.log_dir / "last.ckpt")
    assert second.global_step == 8


def test_unknown_compile_options_are_refused():
    with pytest.raises(ValueError, match="unknown torch.compile option"):
        Trainer(compile={"modes": "max-autotune"})
