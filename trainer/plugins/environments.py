"""Lightning's cluster environments (`from trainer.plugins.environments import SLURMEnvironment`).

The Trainer reads the launcher's variables itself (torchrun's `RANK`, `WORLD_SIZE`, ...,
SLURM's `SLURM_PROCID`, `SLURM_NTASKS`, ...), so none is passed to it: `Trainer(plugins=[...])`
with one raises an error saying what to write (for SLURM's requeueing, `Trainer(requeue=...,
requeue_signal=...)`). The classes answer Lightning's questions about the process (ranks,
world size, the job's id), read from the environment.

Example:
    >>> from trainer.plugins.environments import SLURMEnvironment
    >>> SLURMEnvironment(auto_requeue=False).trainer_instead()
    'Trainer(requeue=False)'
"""

from __future__ import annotations

import os
import signal as signals

__all__ = ["ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment"]


def _int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


class ClusterEnvironment:
    """The process's place in the job, from torchrun's variables (one process without them)."""

    @property
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return _int("MASTER_PORT", 0)

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return _int("WORLD_SIZE", 1)

    def global_rank(self) -> int:
        return _int("RANK", 0)

    def local_rank(self) -> int:
        return _int("LOCAL_RANK", 0)

    def node_rank(self) -> int:
        return _int("GROUP_RANK", _int("NODE_RANK", 0))

    def trainer_instead(self) -> str:
        """What to write instead of passing this environment to the Trainer."""
        return "nothing: the Trainer reads the launcher's variables (torchrun, srun) itself"


class LightningEnvironment(ClusterEnvironment):
    """Lightning's default environment (torchrun-style variables)."""


class TorchElasticEnvironment(ClusterEnvironment):
    """torchrun's environment."""

    @staticmethod
    def detect() -> bool:
        return all(name in os.environ for name in ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))


class SLURMEnvironment(ClusterEnvironment):
    """SLURM's variables. `auto_requeue` and `requeue_signal` are the Trainer's `requeue` and
    `requeue_signal` here (see `trainer_instead`)."""

    def __init__(self, auto_requeue: bool = True, requeue_signal: signals.Signals | None = None) -> None:
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        return "SLURM_NTASKS" in os.environ and SLURMEnvironment.job_name() not in ("bash", "interactive")

    @staticmethod
    def job_name() -> str | None:
        return os.environ.get("SLURM_JOB_NAME")

    @staticmethod
    def job_id() -> int | str | None:
        """SLURM's job id; in an array job `<array job id>_<task id>`."""
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        if array is not None:
            return f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
        value = os.environ.get("SLURM_JOB_ID", "")
        return int(value) if value.isdigit() else None

    def world_size(self) -> int:
        return _int("SLURM_NTASKS", 1)

    def global_rank(self) -> int:
        return _int("SLURM_PROCID", 0)

    def local_rank(self) -> int:
        return _int("SLURM_LOCALID", 0)

    def node_rank(self) -> int:
        return _int("SLURM_NODEID", 0)

    def trainer_instead(self) -> str:
        written = ([] if self.auto_requeue else ["requeue=False"]) + (
            [f"requeue_signal={signals.Signals(self.requeue_signal).name!r}"] if self.requeue_signal is not None else [])
        if not written:
            return "nothing: inside a SLURM batch job the Trainer requeues the job on SIGUSR1 by default"
        return f"Trainer({', '.join(written)})"
