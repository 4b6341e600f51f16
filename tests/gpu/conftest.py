"""Deterministic CUDA for the GPU suite, so a run and its hand-written loop agree bit for bit.

cuBLAS reads CUBLAS_WORKSPACE_CONFIG when it initialises, so it is set when this file is
imported (before any test touches CUDA); each test then runs with deterministic algorithms,
cuDNN deterministic and not benchmarking, and TF32 off, restored afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def deterministic_cuda() -> Iterator[None]:
    if not torch.cuda.is_available():
        yield
        return
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32)
    torch.use_deterministic_algorithms(True)
    cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = True, False, False, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = saved[2:]
        torch.cuda.set_sync_debug_mode("default")
