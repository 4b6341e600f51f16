"""The CUDA and NCCL paths whose logic does not need a GPU, checked on the CPU: the CUDA RNG
state a rank saves and restores, the device each process picks, the process group's backend.
(What needs a GPU is in tests/test_gpu*.py, `python -m pytest -m gpu`.)"""

from __future__ import annotations

import pytest
import torch

from trainer._utils import rng_state, set_rng_state


class FakeCuda:
    """torch.cuda as a machine with `count` GPUs would answer, recording RNG calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, count: int, current: int = 0) -> None:
        self.count, self.current = count, current
        self.set_calls: list[tuple[torch.Tensor, object]] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": torch.full((4,), int(device), dtype=torch.uint8))
        monkeypatch.setattr(torch.cuda, "set_rng_state", self._set)

        def no_all(*_: object) -> None:
            raise AssertionError("the state of every visible device is neither saved nor restored")

        monkeypatch.setattr(torch.cuda, "get_rng_state_all", no_all)
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", no_all)

    def _set(self, state: torch.Tensor, device: object = "cuda") -> None:
        index = self.current if device == "cuda" else int(device)  # type: ignore[call-overload]
        if index >= self.count:
            raise RuntimeError(f"invalid device ordinal {index}")
        self.set_calls.append((state, device))


def test_a_rank_saves_the_rng_of_its_own_device_only(monkeypatch):
    cuda = FakeCuda(monkeypatch, count=4, current=2)
    state = rng_state()
    assert len(state["cuda"]) == 1 and state["cuda"][0].tolist() == [2, 2, 2, 2]


def test_a_checkpoint_with_more_cuda_states_than_devices_restores(monkeypatch):
    """Written on a machine with two GPUs (every visible device's state, as files from before
    held), resumed on one: the current device gets the state of its own index."""
    saved = rng_state()  # CPU-only here: no "cuda" entry yet
    saved["cuda"] = [torch.full((4,), 10, dtype=torch.uint8), torch.full((4,), 11, dtype=torch.uint8)]
    cuda = FakeCuda(monkeypatch, count=1, current=0)
    set_rng_state(saved)
    assert len(cuda.set_calls) == 1 and cuda.set_calls[0][0].tolist() == [10] * 4


def test_a_single_saved_state_goes_to_the_current_device(monkeypatch):
    cuda = FakeCuda(monkeypatch, count=2, current=1)
    saved = rng_state()
    set_rng_state(saved)
    (state, device), = cuda.set_calls
    assert state.tolist() == [1] * 4 and device == "cuda"  # "cuda": the current device
