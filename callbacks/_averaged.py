"""An `AveragedModel` whose update makes no host-to-device copy and no device read.

`torch.optim.swa_utils.AveragedModel.update_parameters` copies its counter `n_averaged` to the
weights' device once per parameter and buffer (a blocking host-to-device copy on CUDA, which
drains the stream), and reads it back for its `n_averaged == 0` and `n_averaged > 0` tests when
the counter lives on the device. This subclass keeps the counter on the host, where reading it
costs nothing, and hands the averaging functions what they need without copying it:

- the exponential moving average of a known decay (`EMAWeightAveraging`): `_foreach` kernels that
  compute `decay * average + (1 - decay) * weight` in the same operations, rounded the same way, as
  `get_ema_avg_fn` does tensor by tensor;
- SWA's equal average (no function given), and a user's `avg_fn` or `multi_avg_fn`: torch's own
  code path, with the counter made on the device by a fill kernel (`torch.full`, no copy), or,
  where torch would turn it into a Python number anyway (the weight of `_foreach_lerp_`), the host
  counter itself.

The result is bit-identical to `AveragedModel`'s; `n_averaged` and the state dict are unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.swa_utils import AveragedModel, get_swa_avg_fn, get_swa_multi_avg_fn
from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices, _group_tensors_by_device_and_dtype

__all__ = ["HostCountedAverage"]

# The EMA's foreach update holds two temporaries the size of one chunk at a time.
_CHUNK_ELEMENTS = 1 << 26


class HostCountedAverage(AveragedModel):
    """`AveragedModel(module, ...)` with `ema_decay`: the average is the EMA of that decay (the
    `avg_fn` given should then be `get_ema_avg_fn(ema_decay)`, kept for code that reads it)."""

    def __init__(self, model: torch.nn.Module, *args: Any, ema_decay: float | None = None, **kwargs: Any) -> None:
        super().__init__(model, *args, **kwargs)
        if self.n_averaged.device.type != "cpu":  # the counter lives on the host, whatever the device
            self.n_averaged = self.n_averaged.cpu()
        self.ema_decay = ema_decay

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Any:
        """`.to(device)`, `.cuda()`...: the weights move, the counter stays on the host."""
        counter = self.n_averaged
        out = AveragedModel._apply(self, fn, recurse)  # nn.Module._apply, which moves every tensor
        self.n_averaged = counter
        return out

    @torch.no_grad()
    def update_parameters(self, model: torch.nn.Module) -> None:
        if self.use_buffers:
            averaged = list(itertools.chain(self.module.parameters(), self.module.buffers()))
            current = list(itertools.chain(model.parameters(), model.buffers()))
        else:
            averaged, current = list(self.parameters()), list(model.parameters())
        pairs = [(a.detach(), c.detach().to(a.device)) for a, c in zip(averaged, current)]
        count = int(self.n_averaged)  # on the host: no device read
        if count == 0:
            for a, c in pairs:
                a.copy_(c)
        elif pairs:
            self._average([a for a, _ in pairs], [c for _, c in pairs], count)
        if not self.use_buffers:  # buffers follow the module
            for b_average, b_model in zip(self.module.buffers(), model.buffers()):
                b_average.detach().copy_(b_model.detach().to(b_average.device))
        self.n_averaged += 1

    def _average(self, averaged: list[Tensor], current: list[Tensor], count: int) -> None:
        def on(device: torch.device | None) -> Tensor:  # the counter on a device, by a fill kernel
            return torch.full((), count, dtype=torch.long, device=device)

        if self.avg_fn is not None and self.multi_avg_fn is None:
            by_device: dict[torch.device, Tensor] = {}
            floats: list[tuple[Tensor, Tensor]] = []
            for a, c in zip(averaged, current):
                if self.ema_decay is not None and (a.is_floating_point() or a.is_complex()):
                    floats.append((a, c))
                    continue
                n = by_device.get(a.device)
                if n is None:
                    n = by_device[a.device] = on(a.device)
                a.copy_(self.avg_fn(a, c, n))
            if floats:
                _ema(floats, float(self.ema_decay))  # type: ignore[arg-type]
            return
        groups = _group_tensors_by_device_and_dtype([averaged, current])  # type: ignore[list-item]
        for (device, dtype), ([group_averaged, group_current], _) in groups.items():
            group_a: list[Tensor] = list(group_averaged)  # type: ignore[arg-type]
            group_c: list[Tensor] = list(group_current)  # type: ignore[arg-type]
            if self.multi_avg_fn is not None:
                self.multi_avg_fn(group_a, group_c, on(device))
            elif device is not None and device.type in _get_foreach_kernels_supported_devices():
                # SWA: floats take `_foreach_lerp_(..., 1 / (n + 1))`, which torch reads into a
                # Python number; computed from the host counter, that read costs no sync.
                floating = dtype.is_floating_point or dtype.is_complex
                counter = torch.tensor(count, dtype=torch.long) if floating else on(device)
                get_swa_multi_avg_fn()(group_a, group_c, counter)
            else:
                swa, n = get_swa_avg_fn(), on(device)
                for a, c in zip(group_a, group_c):
                    a.copy_(swa(a, c, n))


def _ema(pairs: list[tuple[Tensor, Tensor]], decay: float) -> None:
    """`a <- decay * a + (1 - decay) * c` for every pair, as `get_ema_avg_fn` computes it (three
    roundings: both products, then their sum), in foreach kernels grouped by device and dtype."""
    groups: dict[tuple[torch.device, torch.dtype], list[tuple[Tensor, Tensor]]] = {}
    for a, c in pairs:
        groups.setdefault((a.device, a.dtype), []).append((a, c))
    for group in groups.values():
        start = 0
        while start < len(group):
            stop, size = start + 1, group[start][0].numel()
            while stop < len(group) and size + group[stop][0].numel() <= _CHUNK_ELEMENTS:
                size += group[stop][0].numel()
                stop += 1
            averages, currents = [a for a, _ in group[start:stop]], [c for _, c in group[start:stop]]
            # Out of place, as `decay * a` is: the CPU's in-place `_foreach_mul_` rounds the
            # scalar to a reduced-precision tensor's dtype first.
            total = torch._foreach_mul(averages, decay)
            torch._foreach_add_(total, torch._foreach_mul(currents, 1 - decay))
            torch._foreach_copy_(averages, total)
            del total
            start = stop
