"""Lightning's `lightning.pytorch.utilities.memory`: free the CUDA cache, tell an
out-of-memory error apart, detach a nest of tensors.

Example:
    >>> import torch
    >>> from trainer.utilities.memory import is_oom_error, recursive_detach
    >>> is_oom_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    True
    >>> recursive_detach({"loss": torch.ones(1, requires_grad=True)})["loss"].requires_grad
    False
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["garbage_collection_cuda", "is_oom_error", "is_cuda_out_of_memory", "is_out_of_cpu_memory", "recursive_detach"]


def garbage_collection_cuda() -> None:
    """Collect Python's garbage, then give PyTorch's cached CUDA memory back (nothing without CUDA)."""
    gc.collect()
    if torch.cuda.is_available():
        try:
            torch.cuda.empty_cache()
        except RuntimeError as error:  # the cache itself could not be freed: out of memory is no surprise here
            if not is_oom_error(error):
                raise


def is_cuda_out_of_memory(exception: BaseException) -> bool:
    return isinstance(exception, torch.cuda.OutOfMemoryError) or (
        isinstance(exception, RuntimeError) and "CUDA" in str(exception) and "out of memory" in str(exception))


def is_out_of_cpu_memory(exception: BaseException) -> bool:
    return isinstance(exception, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(exception)


def is_oom_error(exception: BaseException) -> bool:
    """Whether `exception` says the memory of a device ran out (CUDA, cuDNN's or the CPU allocator's)."""
    cudnn = isinstance(exception, RuntimeError) and "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED." in str(exception)
    return is_cuda_out_of_memory(exception) or cudnn or is_out_of_cpu_memory(exception)


def recursive_detach(in_dict: Any, to_cpu: bool = False) -> Any:
    """Every tensor of a nested dict/list/tuple detached from its graph (and moved to the CPU with `to_cpu`)."""
    if isinstance(in_dict, torch.Tensor):
        out = in_dict.detach()
        return out.cpu() if to_cpu else out
    if isinstance(in_dict, Mapping):
        return {key: recursive_detach(value, to_cpu) for key, value in in_dict.items()}
    if isinstance(in_dict, (list, tuple)):
        items = [recursive_detach(value, to_cpu) for value in in_dict]
        return type(in_dict)(*items) if hasattr(in_dict, "_fields") else type(in_dict)(items)
    return in_dict
