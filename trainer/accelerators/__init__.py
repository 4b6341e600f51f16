"""Lightning's accelerators at Lightning's path (`from trainer.accelerators import
find_usable_cuda_devices, CUDAAccelerator`). `Trainer(accelerator=CUDAAccelerator())` is
`accelerator="cuda"` (the Trainer's `device=`).

Example:
    >>> from trainer.accelerators import CPUAccelerator
    >>> CPUAccelerator.is_available(), CPUAccelerator().trainer_device
    (True, 'cpu')
"""

from __future__ import annotations

import os

import torch

__all__ = ["Accelerator", "CPUAccelerator", "CUDAAccelerator", "MPSAccelerator", "find_usable_cuda_devices"]


class Accelerator:
    """A kind of device; `trainer_device` is what `Trainer(accelerator=...)` takes it for."""

    trainer_device = "auto"

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def auto_device_count() -> int:
        return 1


class CPUAccelerator(Accelerator):
    trainer_device = "cpu"

    @staticmethod
    def auto_device_count() -> int:
        return 1


class CUDAAccelerator(Accelerator):
    trainer_device = "cuda"

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.is_available()

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()


class MPSAccelerator(Accelerator):
    trainer_device = "mps"

    @staticmethod
    def is_available() -> bool:
        return torch.backends.mps.is_available()


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """The indices of `num_devices` CUDA devices that can take a tensor now (-1: all that can),
    for `Trainer(devices=find_usable_cuda_devices(1))` (GPU i alone).

    Raises:
        ValueError: CUDA is not available and devices were asked for.
        RuntimeError: fewer usable devices than asked for.
    """
    if num_devices == 0:
        return []
    if not torch.cuda.is_available():
        raise ValueError(f"find_usable_cuda_devices({num_devices}): CUDA is not available on this machine "
                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). Expected a GPU; or use device='cpu'.")
    usable = []
    for index in range(torch.cuda.device_count()):
        try:
            torch.empty(1, device=f"cuda:{index}")
        except RuntimeError:
            continue
        usable.append(index)
        if len(usable) == num_devices:
            return usable
    if num_devices > 0:
        raise RuntimeError(f"find_usable_cuda_devices({num_devices}) found only {len(usable)} usable CUDA device(s) "
                           f"{usable}: the others are busy or in exclusive mode. Ask for fewer, or free them.")
    return usable
