"""The CUDA paths: the same parity with a hand-written loop, on a GPU. Skipped without one."""

from __future__ import annotations

import contextlib

import pytest
import torch

from tests.reference import assert_same_weights, loader, make_data, make_model
from trainer import Trainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)"),
]

DTYPES = {"fp32": None, "amp": torch.float16, "bf16": torch.bfloat16}


def cuda_reference(model, data, precision, accumulate):
    device = torch.device("cuda")
    model.to(device)
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "amp")
    n = len(data)
    for i, (x, y) in enumerate(data):
        x, y = x.to(device), y.to(device)
        start = (i // accumulate) * accumulate
        window = min(accumulate, n - start)
        dtype = DTYPES[precision]
        with torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext():
            loss = model.training_step((x, y), i)
        scaler.scale(loss / window).backward()
        if i - start + 1 == window:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_cuda_weights_equal_reference_loop(precision):
    data = make_data()
    ref = make_model()
    torch.manual_seed(1)
    cuda_reference(ref, loader(data), precision, accumulate=3)
    ours = make_model()
    torch.manual_seed(1)
    trainer = Trainer(precision=precision, accumulate_grad_batches=3, gradient_clip_val=1.0, device="cuda",
                      logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(ours, loader(data))
    assert next(ours.parameters()).device.type == "cuda"
    assert_same_weights(ref, ours)
