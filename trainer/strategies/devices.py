"""Which GPU each process computes on, and which backends its process group needs.

Pure decisions (no CUDA call), so they are tested on a machine without a GPU
(tests/test_cuda_paths.py); the strategies apply them:

- `local_cuda_index`: a process started by torchrun, `devices=N` or srun takes the GPU of its
  local rank; a process whose group the user made without a launcher's variables takes the
  group's bound device, else `LOCAL_RANK`, else its rank modulo the GPUs it sees (never GPU 0
  on every rank); one visible GPU is the process's own (SLURM's `--gpus-per-task=1`), unless
  torchrun put several processes on it. More processes per machine than GPUs is an error
  that says so, before NCCL fails on a duplicate GPU.
- `group_backend`: NCCL for CUDA and Gloo for the CPU; with tensors on both (FSDP's
  `cpu_offload`: offloaded gradients are CPU tensors, and their norm and inf checks are
  all-reduced) both, as `"cuda:nccl,cpu:gloo"`.

Example:
    >>> local_cuda_index(local_rank=3, rank=11, visible=8)
    3
    >>> group_backend("cuda", cpu_collectives=True)
    'cuda:nccl,cpu:gloo'
"""

from __future__ import annotations

__all__ = ["local_cuda_index", "group_backend", "has_cpu_backend", "check_devices_fit"]


def local_cuda_index(
    *,
    local_rank: int | None,
    rank: int,
    visible: int,
    local_world_size: int | None = None,
    launcher: str = "torchrun",
    bound: int | None = None,
) -> int:
    """The index (among the visible GPUs) of the GPU this process computes on.

    Args:
        local_rank: the launcher's local rank (None: not known, e.g. a group the user made).
        rank: the global rank.
        visible: `torch.cuda.device_count()`.
        local_world_size: processes on this machine, when the launcher says.
        launcher: "torchrun" (also devices=N), "slurm" or "none" (a group the user made).
        bound: the device the existing process group is bound to (`device_id`), if any.

    Raises:
        ValueError: no GPU, more processes on this machine than GPUs, or a local rank beyond them.
    """
    if visible < 1:
        raise ValueError("expected a CUDA device, but this process sees none (CUDA_VISIBLE_DEVICES, drivers)")
    if bound is not None:
        return bound
    many = local_world_size is not None and local_world_size > visible
    if visible == 1:
        if launcher == "torchrun" and many:
            raise ValueError(
                f"{local_world_size} processes on this machine share its one visible GPU, and NCCL can't put two "
                "ranks on one device. Expected at most one process per GPU: --nproc_per_node / devices at most "
                "the GPU count, or device='cpu'"
            )
        return 0  # the process's own GPU (SLURM --gpus-per-task=1), or the only one
    index = local_rank if local_rank is not None else rank % visible
    if index >= visible or many:
        slurm = (
            ". Under srun each task sees only the GPUs SLURM binds to it: give every task one GPU "
            "(--gpus-per-task=1) or every GPU of the node (no --gpu-bind), not a share of them"
            if launcher == "slurm" else ""
        )
        raise ValueError(
            f"local rank {index} of {local_world_size if local_world_size is not None else '?'} processes on this "
            f"machine, which has {visible} visible GPU(s). Expected at most one process per GPU: launch at most "
            f"{visible} per machine (--nproc_per_node / devices / --ntasks-per-node), or train on the CPU{slurm}"
        )
    return index


def group_backend(device_type: str, *, cpu_collectives: bool = False) -> str:
    """The `init_process_group(backend=...)` for a process computing on `device_type`."""
    if device_type != "cuda":
        return "gloo"
    return "cuda:nccl,cpu:gloo" if cpu_collectives else "nccl"


def has_cpu_backend(config: str) -> bool:
    """Whether a group's `dist.get_backend_config()` ("nccl", "cuda:nccl,cpu:gloo", "gloo")
    can run collectives on CPU tensors."""
    parts = [part.strip() for part in config.split(",") if part.strip()]
    if len(parts) == 1 and ":" not in parts[0]:
        return parts[0] != "nccl"  # a bare name serves every device it supports (Gloo: CPU)
    return any(part.split(":", 1)[0] == "cpu" for part in parts)


def check_devices_fit(devices: int, device: str, *, cuda_available: bool, visible: int) -> None:
    """`Trainer(devices=N)`: N processes on this machine each take a GPU when they train on
    CUDA, so N must not exceed the visible GPUs (checked before any process is started).

    Raises:
        ValueError: naming N, the GPUs and what to write instead.
    """
    on_cuda = device.startswith("cuda") or (device == "auto" and cuda_available)
    if devices > 1 and on_cuda and devices > visible:
        raise ValueError(
            f"Trainer(devices={devices}, device={device!r}): {devices} processes would each take a GPU, but this "
            f"machine sees {visible}. Expected devices <= {visible}, or device='cpu' to train {devices} CPU "
            "processes."
        )
