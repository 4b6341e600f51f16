"""Watching for data moved between the host and a device, or a device value read on the host.

Without a GPU, tensors on the `meta` device stand in for CUDA ones (the same code paths): a
test runs the code under `HostDeviceTraffic` and asserts that nothing was seen.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostDeviceTraffic"]


class HostDeviceTraffic(TorchDispatchMode):
    """Records every op that moves data between the host and another device, or reads a value."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        out = func(*args, **kwargs)
        outputs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        moved = func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default) and len(
            {t.device for t in tensors + outputs}
        ) > 1
        read = func is torch.ops.aten._local_scalar_dense.default and tensors[0].device.type != "cpu"
        if moved or read:
            self.seen.append(f"{func} {[t.device.type for t in tensors + outputs]}")
        return out
