"""Throughput beside samples/s: FLOPs counted once (they match a hand count, and counting
leaves the weights bit-exact), FLOP/s, MFU's peak table, items/s, peak memory."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.items import make_item_model, make_token_data
from tests.helpers.reference import RecordingLogger, assert_same_weights, loader, make_data, make_model, reference_fit
from trainer import Module, Trainer
from trainer.logging.throughput import peak_tflops


def fit(model: Module, data: Any, logger: Any, **kwargs: Any) -> Trainer:
    base: dict[str, Any] = dict(max_epochs=1, log_every_n_steps=1, enable_progress_bar=False, enable_checkpointing=False,
                                device="cpu", num_sanity_val_steps=0)
    base.update(kwargs)
    trainer = Trainer(logger=logger, **base)
    trainer.fit(model, data)
    return trainer


class MLP(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def test_flops_of_an_mlp_match_a_hand_count():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randint(0, 10, (64,)))
    logger = RecordingLogger()
    trainer = fit(MLP(), DataLoader(data, batch_size=16), logger)
    # forward: 2 * (in * out) per sample and layer; backward: 2x that for every layer's weight
    # gradient and its input gradient, except the first layer's input (the data needs none)
    forward = 2 * (32 * 64 + 64 * 64 + 64 * 10)
    backward = 2 * (32 * 64) + 2 * 2 * (64 * 64) + 2 * 2 * (64 * 10)
    assert trainer._run.output.throughput.flops_per_sample == forward + backward == 36608
    for step, row in logger.rows:
        if "train/flops_per_sec" in row:  # the same interval as samples/s
            assert row["train/flops_per_sec"] / row["train/samples_per_sec"] == pytest.approx(36608, rel=1e-9), step
    # step 1 is written inside the counted micro-batch, before its count is known
    assert [step for step, row in logger.rows if "train/flops_per_sec" in row] == [2, 3, 4]
    assert "train/mfu" not in trainer.logged_metrics  # a CPU: no peak to divide by
    assert trainer.logged_metrics["train/peak_memory_gib"] > 0.01  # this process's peak resident memory


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_counting_flops_leaves_the_weights_exact(precision, tmp_path):
    data = make_data()
    reference = make_model()
    torch.manual_seed(1)
    reference_fit(reference, loader(data), precision=precision, epochs=2, accumulate=2)
    ours = make_model()
    torch.manual_seed(1)
    trainer = fit(ours, loader(data), RecordingLogger(), max_epochs=2, precision=precision, accumulate_grad_batches=2)
    assert trainer._run.output.throughput.flops_per_sample == 480  # TinyNet: (2 * 112 forward + 2 * 128 backward) per sample
    assert_same_weights(reference, ours)


class Gated(Module):
    """SiLU and Mish: torch has no FLOP formula for their backward, and its FlopCounterMode
    runs their decomposition instead, which rounds differently."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(7, 20), torch.nn.SiLU(), torch.nn.Linear(20, 20), torch.nn.Mish(),
                                       torch.nn.Linear(20, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return (self.net(x).squeeze(-1) - y).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_counting_flops_runs_every_operation_as_it_is(precision):
    """The counted step's gradients are bit-identical to an uncounted run's for operations torch's
    FlopCounterMode would decompose (a run with and without the count, and the count itself
    against FlopCounterMode's)."""
    from torch.utils.flop_counter import FlopCounterMode

    from trainer.logging.throughput import ShapeCounter

    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 7, generator=g)
    data = torch.utils.data.TensorDataset(x, x[:, 0] - 2 * x[:, 3])
    runs = []
    for metrics in (True, False):
        torch.manual_seed(31)
        model = Gated()
        trainer = fit(model, DataLoader(data, batch_size=16), RecordingLogger(), precision=precision, performance_metrics=metrics)
        runs.append((model, trainer._run.output.throughput.flops_per_sample))
    (counted, per_sample), (uncounted, _) = runs
    assert per_sample is not None and per_sample > 0
    assert_same_weights(uncounted, counted)
    torch.manual_seed(0)
    net = Gated().net
    totals = []
    for counter in (ShapeCounter(), FlopCounterMode(display=False)):
        with counter:
            net(x[:16]).sum().backward()
        totals.append(counter.total if isinstance(counter, ShapeCounter) else counter.get_total_flops())
    assert totals[0] == totals[1] == 16 * per_sample  # the same formulas: the same count


def test_switched_off_and_without_a_logger():
    logger = RecordingLogger()
    trainer = fit(make_model(), loader(make_data()), logger, performance_metrics=False)
    written = set().union(*(row for _, row in logger.rows))
    assert not written & {"train/flops_per_sec", "train/mfu", "train/peak_memory_gib"}
    assert "train/samples_per_sec" in written and trainer._run.output.throughput.flops_per_sample is None
    quiet = fit(make_model(), loader(make_data()), False)
    assert quiet._run.output.throughput.flops_per_sample is None  # nothing writes it: nothing counted


def test_items_per_second_from_num_items():
    logger = RecordingLogger()
    data = make_token_data(12)
    fit(make_item_model(), DataLoader(data, batch_size=3), logger)
    per_batch = [int(data.tensors[2][i:i + 3].sum()) for i in range(0, 12, 3)]
    rows = [row for _, row in logger.rows if "train/items_per_sec" in row]
    assert len(rows) == 4
    for row, items in zip(rows, per_batch):  # items/s over steps/s: the items of the interval's one step
        assert row["train/items_per_sec"] / row["train/steps_per_sec"] == pytest.approx(items, rel=1e-9)


@pytest.mark.parametrize("accumulate,expected", [(1, 11520.0), (2, 3 * 5376.0)])
def test_held_item_windows_estimate_their_backward(accumulate, expected):
    # k=1: the window closes inside the counted micro-batch, so its backward is counted;
    # k=2: the first micro-batch's backward waits for the window's end: 3x its forward
    trainer = fit(make_item_model(), DataLoader(make_token_data(12), batch_size=3), RecordingLogger(),
                  accumulate_grad_batches=accumulate)
    assert trainer._run.output.throughput.flops_per_batch == expected


def test_peak_table():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peak_tflops("NVIDIA H100 PCIe", "amp") == 756.5
    assert peak_tflops("NVIDIA H200", "fp32", tf32=True) == 494.7
    assert peak_tflops("NVIDIA A100-SXM4-40GB", "fp32", tf32=False) == 19.5
    assert peak_tflops("NVIDIA L4", "bf16") == 121.0
    assert peak_tflops("NVIDIA GeForce RTX 4090", "bf16") is None


@pytest.mark.parametrize("name,bf16,fp32", [
    ("NVIDIA L40S", 362.05, 91.6),  # not the L40's row, nor the L4's
    ("NVIDIA L40", 181.05, 90.5),  # not the L4's
    ("NVIDIA L4", 121.0, 30.3),
    ("NVIDIA H200 NVL", 835.5, 60.0),  # not the SXM's
    ("NVIDIA H200", 989.4, 67.0),
    ("NVIDIA GH200 480GB", 989.4, 67.0),
    ("NVIDIA GH200 144G HBM3e", 989.4, 67.0),
    ("NVIDIA H100 NVL", 835.5, 60.0),
    ("NVIDIA H100 80GB HBM3", 989.4, 67.0),
    ("NVIDIA A100-PCIE-40GB", 312.0, 19.5),
    ("NVIDIA A100 80GB PCIe", 312.0, 19.5),
    ("NVIDIA A10", None, None),  # not an A100
    ("NVIDIA A1000", None, None),
    ("NVIDIA L4000", None, None),
])
def test_device_names_match_their_own_row_only(name, bf16, fp32):
    assert peak_tflops(name, "bf16") == bf16
    assert peak_tflops(name, "fp32", tf32=False) == fp32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_mfu_on_a_gpu():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 10, (256,)))
    trainer = fit(MLP(), DataLoader(data, batch_size=64), RecordingLogger(), device="cuda", precision="bf16")
    metrics = trainer.logged_metrics
    assert metrics["train/peak_memory_gib"] > 0
    if peak_tflops(torch.cuda.get_device_name(), "bf16") is not None:
        assert 0 < metrics["train/mfu"] < 1


def test_fp32_convolutions_take_the_tf32_peak_when_cudnn_may_use_it(monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # PyTorch's default
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32", convolutions=True) == 156.0
        assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32", convolutions=False) == 19.5
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32", convolutions=True) == 19.5


class ConvNet(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_the_counter_notes_convolutions():
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 1, 8, 8), torch.randint(0, 2, (16,)))
    conv = fit(ConvNet(), DataLoader(data, batch_size=4), RecordingLogger())
    assert conv._run.output.throughput.convolutions
    plain = fit(make_model(), loader(make_data(16)), RecordingLogger())
    assert not plain._run.output.throughput.convolutions
