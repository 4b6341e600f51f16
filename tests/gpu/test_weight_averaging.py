"""EMA on a GPU: an update makes no host synchronisation (checked by CUDA's sync debug mode),
and the average equals `torch.optim.swa_utils.AveragedModel`'s bit for bit, also in bf16/fp16,
where the foreach kernels' rounding must match the per-tensor ones."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn
from torch.utils.data import DataLoader

import callbacks
from tests.gpu._references import GPU, QUIET
from tests.gpu.test_sync_free import Fused, SyncsAreErrors
from tests.helpers.reference import make_data
from trainer import Trainer

pytestmark = GPU


class FitLike:  # what the callback reads when fit starts
    class strategy:
        name = "single"

    class state:
        skipped_steps = 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["ema", "swa", "multi_avg_fn"])
def test_the_average_on_cuda_is_bit_identical_and_sync_free(dtype, kind):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 4)).to("cuda", dtype)
    kwargs: dict[str, Any] = {"ema": {"avg_fn": get_ema_avg_fn(0.9)}, "swa": {},
                              "multi_avg_fn": {"multi_avg_fn": get_ema_multi_avg_fn(0.7)}}[kind]
    reference = AveragedModel(copy.deepcopy(module), use_buffers=True, **kwargs)
    averaging: Any = callbacks.EMAWeightAveraging(decay=0.9) if kind == "ema" else callbacks.WeightAveraging(**kwargs)
    trainer = FitLike()
    averaging.on_fit_start(trainer, module)
    ours = averaging.average_model
    for _ in range(5):
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p))
        reference.update_parameters(module)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            ours.update_parameters(module)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        for (name, a), b in zip(ours.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(a.cpu(), b.cpu()), name


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_fit_with_ema_makes_no_host_sync_per_step(precision):
    watch = SyncsAreErrors(start=3, stop=20)
    ema = callbacks.EMAWeightAveraging(decay=0.99)
    data = DataLoader(make_data(200), batch_size=8, shuffle=True, pin_memory=True)  # 25 steps: one epoch
    trainer = Trainer(precision=precision, max_epochs=1, log_every_n_steps=1000, device="cuda", num_sanity_val_steps=0,
                      callbacks=[watch, ema], **QUIET)
    try:
        trainer.fit(Fused(dropout=0.0), data)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert watch.checked == 17 and int(ema.average_model.n_averaged) == 25
