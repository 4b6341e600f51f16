"""The CUDA and NCCL paths whose logic does not need a GPU, checked on the CPU: the CUDA RNG
state a rank saves and restores, the device each process picks, the process group's backend.
(What needs a GPU is in tests/gpu/, `python -m pytest -m gpu`.)"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.reference import TinyNet
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


# ------------------------------------------------------------------ which GPU a process takes
from trainer.strategies.devices import check_devices_fit, group_backend, has_cpu_backend, local_cuda_index  # noqa: E402


@pytest.mark.parametrize("kwargs, expected", [
    (dict(local_rank=3, rank=11, visible=8, local_world_size=8), 3),  # torchrun / devices=N: the local rank
    (dict(local_rank=None, rank=5, visible=4), 1),  # a group the user made, no launcher variables: rank % GPUs
    (dict(local_rank=None, rank=5, visible=4, launcher="none", bound=2), 2),  # ...bound to a device: that one
    (dict(local_rank=1, rank=1, visible=1, local_world_size=2, launcher="slurm"), 0),  # --gpus-per-task=1
    (dict(local_rank=0, rank=0, visible=1, local_world_size=1), 0),  # torchrun --nproc_per_node=1
])
def test_each_process_takes_its_own_gpu(kwargs, expected):
    assert local_cuda_index(**kwargs) == expected


@pytest.mark.parametrize("kwargs, message", [
    (dict(local_rank=1, rank=1, visible=1, local_world_size=2), "share its one visible GPU"),
    (dict(local_rank=2, rank=2, visible=2, local_world_size=3), "which has 2 visible GPU"),
    (dict(local_rank=0, rank=0, visible=0), "sees none"),
    # srun --gpu-bind=closest shows each task a share of the node's GPUs: say what SLURM should give
    (dict(local_rank=5, rank=5, visible=4, local_world_size=8, launcher="slurm"), r"--gpus-per-task=1"),
])
def test_more_processes_than_gpus_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        local_cuda_index(**kwargs)


def test_an_explicit_gpu_index_with_several_processes_per_machine_is_refused():
    """device="cuda:1" under DDP would put every local rank on GPU 1 (NCCL: "Duplicate GPU detected")."""
    from types import SimpleNamespace

    from trainer.distributed import DDP

    strategy = DDP()
    strategy._cluster = SimpleNamespace(local_world_size=4)  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"device='cuda:1'\) with 4 processes on this machine.*Expected device='cuda'"):
        strategy._local_device("cuda:1")
    assert strategy._local_device("cpu") == torch.device("cpu")
    strategy._cluster = SimpleNamespace(local_world_size=1)  # type: ignore[assignment]  # one process per machine
    assert strategy._local_device("cuda:1") == torch.device("cuda", 1)


def test_devices_n_is_checked_against_the_visible_gpus_before_starting_anything():
    with pytest.raises(ValueError, match=r"devices=4, device='auto'\): 4 processes .* sees 2"):
        check_devices_fit(4, "auto", cuda_available=True, visible=2)
    with pytest.raises(ValueError, match="sees 1"):
        check_devices_fit(2, "cuda", cuda_available=True, visible=1)
    check_devices_fit(2, "auto", cuda_available=True, visible=2)
    check_devices_fit(4, "cpu", cuda_available=True, visible=2)  # CPU processes need no GPU
    check_devices_fit(4, "auto", cuda_available=False, visible=0)


def test_a_user_group_without_launcher_variables_does_not_put_every_rank_on_gpu_0(monkeypatch):
    from trainer.strategies.cluster import ClusterEnvironment
    from trainer.strategies.parallel import ProcessGroupStrategy

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    strategy = ProcessGroupStrategy()
    strategy.rank, strategy.world_size, strategy.local_rank, strategy._cluster = 6, 8, None, ClusterEnvironment()
    assert strategy._local_device("cuda") == torch.device("cuda", 2)


def test_single_device_under_a_launcher_takes_the_local_ranks_gpu(monkeypatch):
    from trainer.strategies import SingleDevice

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name, value in dict(RANK="6", WORLD_SIZE="8", LOCAL_RANK="2", LOCAL_WORLD_SIZE="4").items():
        monkeypatch.setenv(name, value)
    assert SingleDevice("auto").device == torch.device("cuda", 2)
    assert SingleDevice("cuda").device == torch.device("cuda", 2)
    assert SingleDevice("cuda:3").device == torch.device("cuda", 3)  # an explicit index is kept


def test_a_single_device_becomes_the_current_device(monkeypatch):
    from trainer.strategies import SingleDevice

    current: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: current.append(torch.device(device)))
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *args, **kwargs: self)  # no CUDA here to move to
    strategy = SingleDevice("cpu")
    strategy.device = torch.device("cuda", 1)  # what device="cuda:1" resolves to on a GPU machine
    strategy.setup_module(TinyNet())
    assert current == [torch.device("cuda", 1)]


# ------------------------------------------------------------------ the process group's backends
def test_the_group_gets_a_cpu_backend_beside_nccl_when_gradients_are_offloaded():
    assert group_backend("cuda") == "nccl"
    assert group_backend("cuda", cpu_collectives=True) == "cuda:nccl,cpu:gloo"
    assert group_backend("cpu") == group_backend("cpu", cpu_collectives=True) == "gloo"
    assert has_cpu_backend("cuda:nccl,cpu:gloo") and has_cpu_backend("cpu:gloo,cuda:nccl") and has_cpu_backend("gloo")
    assert not has_cpu_backend("nccl") and not has_cpu_backend("cuda:nccl")


def test_fsdp_offload_asks_for_cpu_collectives_and_reports_the_compute_device():
    from trainer.distributed import FSDP
    from trainer.module import Module

    assert FSDP(cpu_offload=True)._cpu_collectives() and not FSDP()._cpu_collectives()
    module = Module()
    module.layer = torch.nn.Linear(1, 1)  # its parameters on the CPU, as offloaded ones are
    object.__setattr__(module, "_compute_device", torch.device("cuda", 0))  # what FSDP sets when it offloads
    assert module.device == torch.device("cuda", 0)


def test_fsdp_offload_refuses_fused_optimizers_before_any_step():
    """Under cpu_offload the fused CPU kernel would read the GPU's skip flags through copies
    nobody waits for; the foreach (default) step reads them correctly."""
    from trainer.distributed import FSDP

    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(ValueError, match=r"FSDP\(cpu_offload=True\) with AdamW\(fused=True\).*Expected fused=False"):
        FSDP(cpu_offload=True).check_optimizers([torch.optim.AdamW(params, fused=True)])
    FSDP(cpu_offload=True).check_optimizers([torch.optim.AdamW(params)])  # foreach: fine
    FSDP().check_optimizers([torch.optim.AdamW(params, fused=True)])  # fused on the GPU: fine


GROUP_SCRIPT = """
import os, torch.distributed as dist
from trainer.strategies.devices import has_cpu_backend
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group(backend="cpu:gloo", rank=0, world_size=1)
config = str(dist.get_backend_config())
print(config, has_cpu_backend(config))
dist.destroy_process_group()
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_a_device_mapped_backend_string_makes_a_group_that_reduces_cpu_tensors(tmp_path):
    """The form the Trainer uses under cpu_offload ("cuda:nccl,cpu:gloo"), here with the CPU
    half only (no NCCL in a CPU build): torch accepts the mapping and reports it back."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PORT": str(port), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", GROUP_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["cpu:gloo", "True"]
