"""Throughput beside `train/samples_per_sec`: items/s, FLOP/s, MFU and peak memory.

- `train/items_per_sec`: with `{"loss": summed, "num_items": n}` returns (item-weighted
  accumulation), the items of every rank per second: the count the loss is divided by.
- `train/flops_per_sec`: the FLOPs of one training sample (forward and backward), counted
  once on the run's first micro-batch with the formulas of `torch.utils.flop_counter`, times
  this rank's samples per second. The counter (`ShapeCounter`) runs every operation as it
  is and only reads its shapes: torch's own `FlopCounterMode` replaces an operation it has
  no formula for by its decomposition (SiLU's and Mish's backward), which changes the last
  bits of that step's gradients, so it is not used (tests/logging/test_throughput.py).
- `train/mfu`: FLOP/s over the device's peak for the run's precision, on the GPUs of
  `PEAK_TFLOPS`; absent elsewhere.
- `train/peak_memory_gib`: the CUDA allocator's peak on a GPU, the process's peak resident
  memory on a CPU, since the process started.

Nothing here reads a tensor: FLOPs come from shapes, memory from allocator or OS counters.

Example:
    >>> peak_tflops("NVIDIA H100 80GB HBM3", "bf16")
    989.4
    >>> peak_tflops("NVIDIA A100-SXM4-80GB", "fp32", tf32=False)
    19.5
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainer.logging.metrics import batch_size_of

__all__ = ["PEAK_TFLOPS", "FlopMeter", "ShapeCounter", "Throughput", "peak_tflops", "peak_memory_gib", "recomputing"]

log = logging.getLogger("trainer")

#: Dense peak TFLOP/s by GPU: bf16/fp16 tensor cores, TF32, and plain fp32 (the vendors' data
#: sheets, halved where they quote sparsity). A key matches `torch.cuda.get_device_name()` when
#: the name is the key or goes on after it with a space or a dash ("NVIDIA H100 80GB HBM3",
#: "NVIDIA A100-SXM4-80GB"), so "NVIDIA L40S" is not an "NVIDIA L40" nor that an "NVIDIA L4";
#: the first key that matches wins, so variants come before their family.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "NVIDIA GH200": {"bf16": 989.4, "tf32": 494.7, "fp32": 67.0},  # Grace Hopper: the H100/H200 SXM's GPU peaks
    "NVIDIA H200 NVL": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "NVIDIA H200": {"bf16": 989.4, "tf32": 494.7, "fp32": 67.0},  # SXM
    "NVIDIA H100 PCIe": {"bf16": 756.5, "tf32": 378.0, "fp32": 51.0},
    "NVIDIA H100 NVL": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "NVIDIA H100": {"bf16": 989.4, "tf32": 494.7, "fp32": 67.0},  # SXM (HBM3)
    "NVIDIA A100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "NVIDIA L40S": {"bf16": 362.05, "tf32": 183.0, "fp32": 91.6},
    "NVIDIA L40": {"bf16": 181.05, "tf32": 90.5, "fp32": 90.5},
    "NVIDIA L4": {"bf16": 121.0, "tf32": 60.0, "fp32": 30.3},
}


def _peaks_of(device_name: str) -> dict[str, float] | None:
    name = device_name.strip()
    for key, peaks in PEAK_TFLOPS.items():
        if name == key or (name.startswith(key) and name[len(key)] in " -"):
            return peaks
    return None


def peak_tflops(device_name: str, precision: str, tf32: bool | None = None, convolutions: bool = False) -> float | None:
    """The peak for `precision` ("fp32", "amp" = fp16, "bf16") on `device_name`, or None.
    fp32 counts TF32 tensor cores when the model's work may run on them (`tf32`; None: torch's
    settings: matmuls in TF32, or, for a model with `convolutions`, cuDNN's TF32, which
    PyTorch turns on by default)."""
    row = _peaks_of(device_name)
    if row is None:
        return None
    if precision in ("amp", "bf16", "fp16"):
        return row["bf16"]
    if tf32 is None:
        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        tf32 = tf32 or (convolutions and torch.backends.cudnn.allow_tf32)
    return row["tf32"] if tf32 else row["fp32"]


def peak_memory_gib(device: torch.device) -> float | None:
    """The CUDA allocator's peak on `device`, else the process's peak resident memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    try:
        import resource
    except ImportError:  # Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**30 if sys.platform == "darwin" else rss / 2**20  # bytes on macOS, KiB on Linux


class ShapeCounter(TorchDispatchMode):
    """Adds up the FLOPs of the operations that run inside it (forward and backward), by
    `torch.utils.flop_counter`'s formulas; an operation without a formula counts 0.

    Each operation runs exactly as without the counter (the same kernel, no decomposition),
    so what it computes is bit-identical.
    """

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.flop_counter import FlopCounterMode

        self.formulas = FlopCounterMode(display=False).flop_registry  # torch's formulas, by operation
        self.total = 0
        self.convolutions = False  # a convolution ran (cuDNN runs fp32 ones in TF32 by default)
        self.paused = 0  # inside activation checkpointing's recomputation (`recomputing`)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = getattr(func, "_overloadpacket", None)
        formula = self.formulas.get(packet)
        if formula is not None and not self.paused:
            self.total += int(formula(*args, **kwargs, out_val=out))
            self.convolutions = self.convolutions or "convolution" in str(packet)
        return out


@contextlib.contextmanager
def recomputing() -> Iterator[None]:
    """Activation checkpointing's second forward, run in backward: the FLOP counters in force
    don't count it, so `train/flops_per_sec` and MFU count the model's FLOPs, not the extra
    work checkpointing trades for memory."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    counters = [mode for mode in _get_current_dispatch_mode_stack() if isinstance(mode, ShapeCounter)]
    for counter in counters:
        counter.paused += 1
    try:
        yield
    finally:
        for counter in counters:
            counter.paused -= 1


class FlopMeter:
    """Counts the FLOPs of the first micro-batch it is given (then the loop drops it)."""

    def __init__(self, throughput: Throughput) -> None:
        self.throughput = throughput

    @contextlib.contextmanager
    def counting(self, batch: Any) -> Iterator[None]:
        counter = ShapeCounter()
        with counter:
            yield
        self.flops = float(counter.total)
        self.convolutions = counter.convolutions
        self.samples = batch_size_of(batch)

    def record(self, backward_ran: bool) -> bool:
        """After the counted micro-batch: keep its count; False: nothing ran, count the next.
        A held item-weighted micro-batch ran its forward only: its backward is taken as twice
        the forward (the usual estimate), so the FLOPs are three times the forward's."""
        flops = self.flops if backward_ran else 3 * self.flops
        if flops <= 0:
            return False
        self.throughput.flops_per_batch = flops
        self.throughput.convolutions = self.convolutions
        self.throughput.flops_per_sample = flops / self.samples if self.samples else None
        log.info("FLOPs of one training micro-batch (forward and backward): %.4g%s", flops,
                 f" ({flops / self.samples:.4g} per sample)" if self.samples else "")
        return True


class Throughput:
    """The scalars above, for one logging interval."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.flops_per_sample: float | None = None
        self.flops_per_batch: float | None = None
        self.convolutions = False  # the counted micro-batch ran convolutions
        self.items = 0.0

    def meter(self, active: bool) -> FlopMeter | None:
        """A meter for the run's first micro-batch, once per Trainer; `active`: this process
        writes scalars and the module is not compiled (counting would run it uncompiled once)."""
        return FlopMeter(self) if active and self.enabled and self.flops_per_batch is None else None

    def add_items(self, count: float) -> None:
        self.items += count

    def reset(self) -> None:
        self.items = 0.0

    def scalars(self, elapsed: float, samples: int | None, micro_batches: float, device: torch.device,
                precision: str) -> dict[str, float]:
        """This interval's scalars: `samples` (None: unknown) and `micro_batches` over `elapsed` seconds."""
        out: dict[str, float] = {}
        if self.items:
            out["train/items_per_sec"] = self.items / elapsed
        self.items = 0.0
        if not self.enabled:
            return out
        if self.flops_per_sample is not None and samples:
            flops = self.flops_per_sample * samples / elapsed
        elif self.flops_per_batch is not None:
            flops = self.flops_per_batch * micro_batches / elapsed
        else:
            flops = math.nan
        if not math.isnan(flops):
            out["train/flops_per_sec"] = flops
            if device.type == "cuda":
                peak = peak_tflops(torch.cuda.get_device_name(device), precision, convolutions=self.convolutions)
                if peak is not None:
                    out["train/mfu"] = flops / (peak * 1e12)
        memory = peak_memory_gib(device)
        if memory is not None:
            out["train/peak_memory_gib"] = memory
        return out
