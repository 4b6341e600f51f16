"""Fingerprints of batches and the first difference between two trained states."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["fingerprint", "first_difference"]


def fingerprint(batch: Any) -> str:
    """A short digest of everything a batch holds (tensors by dtype, shape and bytes; other
    values by their text): equal batches give equal digests, on any device."""
    digest = hashlib.sha1()
    _feed(digest, batch)
    return digest.hexdigest()[:16]


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        digest.update(f"T{data.dtype}{tuple(data.shape)}".encode())
        if data.numel():
            digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, Mapping):
        digest.update(b"{")
        for key in sorted(value, key=str):
            digest.update(str(key).encode())
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"(" if isinstance(value, tuple) else b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b")")
    else:
        digest.update(repr(value).encode())


def first_difference(name: str, a: Any, b: Any) -> str | None:
    """Where two nested states (dicts, lists, tensors, numbers) first differ, with the size of
    the difference, or None when they are equal (tensors `torch.equal`)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{name}: a tensor in one run, {type(b if isinstance(a, torch.Tensor) else a).__name__} in the other"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{name}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        x, y = a.detach().cpu(), b.detach().cpu()
        if torch.equal(x, y):
            return None
        if x.dtype.is_floating_point:
            gap = float((x.double() - y.double()).abs().nan_to_num(float("inf")).max())
            return f"{name}: largest difference {gap:.3g}"
        return f"{name}: {int((x != y).sum())} of {x.numel()} values differ"
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return f"{name}: keys {sorted(map(str, set(a) ^ set(b)))} are in one run only"
        for key in a:
            found = first_difference(f"{name}[{key!r}]", a[key], b[key])
            if found is not None:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{name}: {len(a)} entries vs {len(b)}"
        for index, (x, y) in enumerate(zip(a, b)):
            found = first_difference(f"{name}[{index}]", x, y)
            if found is not None:
                return found
        return None
    try:
        same = bool(a == b)
    except Exception:  # noqa: BLE001 - values that compare element-wise: by their text
        same = repr(a) == repr(b)
    return None if same else f"{name}: {a!r} vs {b!r}"
