"""Weight averaging makes no host-to-device copy and no device read per update, and its average
stays bit-identical to `torch.optim.swa_utils.AveragedModel`'s.

Without a GPU, the module sits on the `meta` device, which takes the code path of `cuda`: any
copy between the host and the weights' device, and any read of a device value, is seen by a
dispatch mode (a read of a meta tensor would raise anyway).
"""

from __future__ import annotations

import copy
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn, get_ema_multi_avg_fn
import callbacks
from tests.helpers.traffic import HostDeviceTraffic


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))


class FakeTrainer:  # what the callback reads when fit starts
    strategy = SimpleNamespace(name="single")
    state = SimpleNamespace(skipped_steps=0)


def started(averaging: Any, module: torch.nn.Module) -> Any:
    trainer = FakeTrainer()
    averaging.on_fit_start(trainer, module)
    averaging._keep = trainer  # the callback holds it weakly
    return averaging.average_model


@pytest.mark.parametrize(
    "averaging",
    [
        lambda: callbacks.EMAWeightAveraging(decay=0.9),
        lambda: callbacks.WeightAveraging(),  # SWA's equal average
        lambda: callbacks.WeightAveraging(multi_avg_fn=get_ema_multi_avg_fn(0.8)),
        lambda: callbacks.WeightAveraging(avg_fn=get_ema_avg_fn(0.8)),
    ],
    ids=["ema", "swa", "multi_avg_fn", "avg_fn"],
)
def test_an_update_copies_nothing_between_host_and_device(averaging):
    module = Net().to("meta")
    average = started(averaging(), module)
    tensors = len(list(module.parameters())) + len(list(module.buffers()))
    for _ in range(3):  # the first update copies the weights; the others average
        with HostDeviceTraffic() as traffic:
            average.update_parameters(module)
        assert traffic.seen == [], f"{len(traffic.seen)} host<->device copies or reads for {tensors} tensors: {traffic.seen}"
    assert int(average.n_averaged) == 3


def mixed_model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    net = Net().to(dtype)  # BatchNorm's num_batches_tracked stays an integer buffer
    net.register_buffer("count", torch.arange(5))
    return net


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "kind", ["ema", "swa", "multi_avg_fn", "avg_fn", "no_buffers"]
)
def test_the_average_is_bit_identical_to_averaged_model(dtype, kind):
    module = mixed_model(dtype)
    kwargs: dict[str, Any] = {
        "ema": {"avg_fn": get_ema_avg_fn(0.9)},
        "swa": {},
        "multi_avg_fn": {"multi_avg_fn": get_ema_multi_avg_fn(0.7)},
        "avg_fn": {"avg_fn": lambda a, c, n: a + (c - a) / (n + 2)},
        "no_buffers": {"avg_fn": get_ema_avg_fn(0.9)},
    }[kind]
    use_buffers = kind != "no_buffers"
    reference = AveragedModel(copy.deepcopy(module), use_buffers=use_buffers, **kwargs)
    if kind in ("ema", "no_buffers"):
        averaging: Any = callbacks.EMAWeightAveraging(decay=0.9, use_buffers=use_buffers)
    else:
        averaging = callbacks.WeightAveraging(use_buffers=use_buffers, **kwargs)
    ours = started(averaging, module)
    generator = torch.Generator().manual_seed(1)
    for _ in range(6):
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                noise = torch.randn(t.shape, generator=generator)
                t.add_((noise * 3).to(t.dtype) if t.is_floating_point() else (noise > 0).to(t.dtype))
        reference.update_parameters(module)
        ours.update_parameters(module)
        for (name, a), b in zip(ours.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(a, b), f"{name} differs"
    assert ours.n_averaged.device.type == "cpu"


def test_the_counter_stays_on_the_host_when_the_average_moves():
    average = started(callbacks.EMAWeightAveraging(decay=0.5), Net())
    average.to("meta")
    assert average.n_averaged.device.type == "cpu"
    assert next(average.module.parameters()).device.type == "meta"
    assert weakref.ref(average)() is average


def test_the_ema_in_chunks_is_the_same(monkeypatch):
    import callbacks._averaged as averaged

    results = []
    for chunk in (1 << 26, 7):  # one foreach call per group, or a few tensors at a time
        monkeypatch.setattr(averaged, "_CHUNK_ELEMENTS", chunk)
        module = mixed_model(torch.float32)
        ours = started(callbacks.EMAWeightAveraging(decay=0.9), module)
        for _ in range(3):
            with torch.no_grad():
                for p in module.parameters():
                    p.mul_(1.5).add_(0.25)
            ours.update_parameters(module)
        results.append(ours.state_dict())
    for key in results[0]:
        assert torch.equal(results[0][key], results[1][key]), key
