"""`compile` on a GPU: the default mode equals a hand-written loop over the same model
compiled the same way; `mode="reduce-overhead"` (CUDA graphs) with one micro-batch per step
trains to the eager weights (within rounding) and predicts copies that later replays do not
overwrite. (CUDA graphs with accumulation are refused at construction: tests/loops/test_compiled_outputs.py.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from tests.gpu._references import CUDA, GPU, QUIET, cuda_fit
from tests.helpers.reference import TinyNet, assert_same_weights, loader, make_data
from trainer import Trainer

pytestmark = GPU


class Net(TinyNet):
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        x, _ = batch
        return self(x)


def net() -> Net:
    torch.manual_seed(0)
    return Net(dropout=0.0)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_default_mode_equals_a_hand_written_compiled_loop(precision):
    data = make_data(64)
    ours, reference = net(), net()
    Trainer(max_epochs=2, precision=precision, compile=True, device="cuda", num_sanity_val_steps=0, **QUIET).fit(
        ours, loader(data, shuffle=False))
    reference.compile()
    cuda_fit(reference, loader(data, shuffle=False), precision=precision, epochs=2)
    assert_same_weights(ours, reference)


def test_reduce_overhead_trains_to_the_eager_weights_and_predicts_lasting_copies():
    data = make_data(64)
    compiled, eager = net(), net()
    trainer = Trainer(max_epochs=2, compile={"mode": "reduce-overhead"}, device="cuda", num_sanity_val_steps=0, **QUIET)
    trainer.fit(compiled, loader(data, shuffle=False))
    cuda_fit(eager, loader(data, shuffle=False), epochs=2)
    assert_same_weights(compiled, eager, atol=1e-4)  # inductor's kernels may round differently from eager
    assert torch.isfinite(torch.tensor(trainer.callback_metrics["train/mse"]))
    outputs = trainer.predict(compiled, loader(make_data(16), shuffle=False))
    reference = copy.deepcopy(compiled).eval()  # a copy is eager (nn.Module drops the compiled call)
    with torch.no_grad():
        for out, (x, _) in zip(outputs, loader(make_data(16), shuffle=False)):
            assert out.device.type == "cpu"
            torch.testing.assert_close(out, reference(x.to(CUDA)).cpu(), rtol=1e-5, atol=1e-5)
    assert not torch.equal(outputs[0], outputs[-1])  # each batch's own, not the last replay's memory
