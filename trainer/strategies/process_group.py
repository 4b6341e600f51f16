"""The process group of a multi-process strategy: made from the launcher's environment on
first use (with the strategy's timeout, bound to the rank's GPU), checked when the user made it,
and released when the process exits, after the ranks meet (or at once when a rank failed alone).

The part of `ProcessGroupStrategy` (parallel.py) that owns the group's life.
"""

from __future__ import annotations

import atexit
import datetime
import inspect
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from trainer.strategies.cluster import restart_store
from trainer.strategies.collectives import CollectiveError, looks_like_collective_failure
from trainer.strategies.devices import group_backend, has_cpu_backend

if TYPE_CHECKING:
    import torch

    from trainer.strategies.cluster import ClusterEnvironment
    from trainer.strategies.collectives import CollectiveGuard

__all__ = ["EXIT_WAIT_S", "GroupLifecycle"]

log = logging.getLogger("trainer")

# At exit, how long a rank that failed waits for the others to come to the exit too (an error
# every rank raised together), before it releases the process group without meeting them.
EXIT_WAIT_S = 5.0


class GroupLifecycle:
    """The part of `ProcessGroupStrategy` (parallel.py) that makes, checks and releases the
    default process group."""

    if TYPE_CHECKING:
        rank: int
        world_size: int
        device: torch.device
        timeout: datetime.timedelta | None
        _guard: CollectiveGuard | None
        _cluster: ClusterEnvironment
        _created_group: bool
        _failed: bool
        _peer_lost: bool

        def _watch_collectives(self) -> None: ...

    def _cpu_collectives(self) -> bool:
        """Whether collectives run on CPU tensors too (FSDP's cpu_offload): the group then has
        a Gloo backend beside NCCL."""
        return False

    def _check_group_backends(self) -> None:
        """A group the user made must serve the CPU tensors this strategy reduces."""
        from torch import distributed as dist

        if self._created_group or not self._cpu_collectives() or self.device.type != "cuda":
            return
        config = str(dist.get_backend_config())
        if not has_cpu_backend(config):
            raise ValueError(
                f"Trainer(strategy={self!r}): the process group made before the Trainer has backend {config!r}, "
                "but this strategy also reduces CPU tensors (offloaded gradients). Expected a group with a CPU "
                "backend: dist.init_process_group(backend='cuda:nccl,cpu:gloo'), or let the Trainer make it."
            )

    def _group(self) -> Any:
        """The default process group, made from torchrun's environment on first use."""
        from torch import distributed as dist

        if not dist.is_initialized():
            backend = group_backend(self.device.type, cpu_collectives=self._cpu_collectives())
            options: dict[str, Any] = {} if self.timeout is None else {"timeout": self.timeout}
            if self.device.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
                options["device_id"] = self.device  # the group is bound to this rank's GPU (torch >= 2.3)
            try:
                store = restart_store(self.timeout) if self._cluster.kind == "torchrun" else None  # one per attempt
                where = {"init_method": self._cluster.init_method} if store is None else {"store": store}
                dist.init_process_group(backend=backend, rank=self.rank, world_size=self.world_size, **where, **options)
            except RuntimeError as error:
                if not _rendezvous_failed(error):
                    raise
                raise RuntimeError(self._rendezvous_message(error)) from error
            self._created_group = True
            atexit.register(self._destroy_group)  # process exit: release it cleanly (after a barrier)
            log.info("Process group %s: rank %d of %d on %s.", backend, self.rank, self.world_size, self.device)
        return dist.group.WORLD

    def _rendezvous_message(self, error: RuntimeError) -> str:
        waited = f"{self.timeout.total_seconds():g} s" if self.timeout is not None else "the backend's timeout"
        hint = (" Under SLURM every task must be started by srun (`srun python train.py`); `python train.py` "
                "run directly in the batch script is one task that waits for the others."
                if self._cluster.kind == "slurm" else "")
        return (f"Rank {self.rank} of {self.world_size} could not form the process group ({self._cluster.describe()}) "
                f"within {waited}: not every rank joined, or rank 0's address is unreachable. Received: "
                f"{str(error).strip().splitlines()[0].rstrip('.') if str(error).strip() else type(error).__name__}.{hint}")

    def _destroy_group(self) -> None:
        """At process exit: wait for every rank, then release the group we made.

        Gloo aborts a rank whose peer tears down while still talking to it, so the ranks
        meet first. After a failure a peer may be gone or stuck in another collective, so
        the meeting is bounded (Gloo's monitored barrier) or skipped (NCCL) instead of
        hanging the exit of a job torchrun is already ending.
        """
        from torch import distributed as dist

        atexit.unregister(self._destroy_group)
        if not (self._created_group and dist.is_initialized()):
            if self._guard is not None:
                self._guard.stop()
            return
        self._created_group = False
        uncaught = getattr(sys, "last_value", None)  # exiting on an uncaught exception
        self._peer_lost = self._peer_lost or _collective_failure(uncaught)
        everyone = self._all_at_exit(failed=self._failed or uncaught is not None)
        if not everyone:
            # This rank failed, and a peer did not come to the exit: it may be waiting for this
            # rank inside a collective (DDP's all-reduce) that will never complete. Meeting it
            # would hang (a Gloo monitored_barrier bounds only rank 0's wait), so release the
            # group at once: the peer's collective then fails, and torchrun ends the job.
            if self._guard is not None:
                self._guard.stop()
            dist.destroy_process_group()
            return
        try:
            self._exit_barrier()
        except CollectiveError as error:  # a rank did not arrive within the timeout: named, and ended by its watchdog
            log.error("%s", error)
        except RuntimeError as error:  # a peer is gone: nothing left to wait for
            log.warning("Ranks did not all reach the exit barrier (%s); releasing the process group.", error)
        finally:
            if self._guard is not None:
                self._guard.stop()
        dist.destroy_process_group()

    def _all_at_exit(self, failed: bool) -> bool:
        """Whether every rank came to the exit. Every rank counts itself in through the job's
        store (no collective); a rank that failed then waits, a bounded time, for the others.
        A failure every rank raised together (an error they agreed on) thus still meets in the
        exit barrier: Gloo aborts a process whose peer releases the group while their last
        exchange is still in flight. A rank that failed alone goes on after the wait."""
        from torch.distributed import distributed_c10d

        from trainer.strategies.agreement import count_in

        try:
            store = distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):
            return not failed
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # torchrun's store outlives a restart
        wait_s = EXIT_WAIT_S if failed and not self._peer_lost else 0.0
        return count_in(store, f"trainer/exit/{restart}", self.world_size, wait_s=wait_s) or not failed

    def _exit_barrier(self) -> None:
        """The ranks meet before the group is released, no longer than `timeout` (10 minutes
        without one). With a timeout the meeting is one of the Trainer's named collectives and
        the watchdog runs meanwhile: a rank that does not arrive (stuck in `on_fit_end`, say)
        is named in this rank's error and ended by its own watchdog."""
        from torch import distributed as dist

        def meet() -> None:
            if dist.get_backend() == "gloo":  # Gloo's barrier that fails after its timeout on every rank
                dist.monitored_barrier(timeout=self.timeout or datetime.timedelta(seconds=600))
            else:
                dist.barrier()

        if self._guard is None:
            meet()
            return
        self._watch_collectives()  # stopped at teardown: the wait at exit is watched too
        self._guard.run("the exit barrier (where the ranks meet at process exit, before the process group is released)",
                        meet)


def _rendezvous_failed(error: RuntimeError) -> bool:
    """`init_process_group` gave up meeting the other ranks (a store that timed out or could
    not be reached), not some other problem."""
    from torch import distributed as dist

    store_errors = tuple(getattr(dist, name) for name in ("DistStoreError", "DistNetworkError") if hasattr(dist, name))
    text = str(error).lower()
    return isinstance(error, store_errors) or "timed out" in text or "connect" in text


def _collective_failure(error: BaseException | None) -> bool:
    """Whether `error` is a collective that failed (a peer that did not come, or is gone)."""
    return error is not None and (isinstance(error, CollectiveError) or looks_like_collective_failure(error))
