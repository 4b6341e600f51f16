"""Decisions the ranks agree on through the job's store, never through a collective.

Two decisions come up at moments when the ranks cannot meet in a collective: the step to stop
at after a signal, and whether a sync micro-batch that returned no loss on this rank was
skipped on every rank (`all_skip`, below).

## The step to stop at after SIGTERM or SLURM's warning signal

Under DDP/FSDP every rank must stop after the same optimizer step, or the ranks that go on wait
forever in a collective for those that stopped. A launcher's signal (torchrun forwards its
SIGTERM to every worker; SLURM signals every task of the step) reaches the ranks at slightly
different moments, so each rank may first see it at a different step boundary, and the hosts
of the ranks are not in step with each other either.

The ranks agree through the key-value store the process group was made with (host memory on
rank 0's machine, no device and no collective involved), and only once they have received a
signal: a run without one pays nothing but a look at a local flag per step. From its first
step boundary after the signal on, a rank consults one key at every boundary:

- while the key is open it holds the highest step boundary any signalled rank has reached;
  a rank raises it to its own step (compare-and-set) and carries on training;
- each rank counts itself in once; the rank that completes the count (every rank has had the
  signal) seals the key with `target = highest step seen + 1`;
- a rank that finds the key sealed stops after step `target`.

No rank can have passed `target` unseen: every rank reads the key at every boundary after it
joined, the last value it raised (or read) is at most the highest value the seal saw, and its
next boundary is at most one more. A signal that reaches some ranks only is never sealed here;
the collective agreement at logging steps and epoch ends (`RunContext.agree_stop`) stops the
run then, as before.

## A sync micro-batch skipped on every rank, or on some only

A window's last micro-batch all-reduces the gradients in its backward. When `training_step`
returns None for it on one rank, that rank asks whether every rank did the same (a skip the
ranks agree on, which goes on as in one process), and waits a bounded time for them: ranks
that returned a loss are waiting in DDP's all-reduce and never answer, and the skipping rank
then raises instead of leaving them to the backend's timeout. Only that path touches the store.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["StoreAgreement", "count_in"]

_PREFIX = "trainer/stop/"
_SEALED = "T"


class StoreAgreement:
    """One fit's decisions through the store: `start` on every rank when fit starts; `stop_here`
    at every step boundary of a rank that received the signal; `all_skip` when a sync
    micro-batch returned no loss."""

    def __init__(self, store: Any, world_size: int, prefix: str) -> None:
        self._store = store
        self._world_size = world_size
        self._key = prefix + "step"
        self._count_key = prefix + "joined"
        self._skip_prefix = prefix + "skip/"
        self._joined = False
        self.target: int | None = None

    @classmethod
    def start(cls, store: Any, world_size: int) -> StoreAgreement:
        """Every rank, once per fit (one store round trip): this fit's keys, the same on
        every rank (each rank adds once per fit, and no rank starts the next fit before every
        rank has started this one)."""
        fit = (int(store.add(_PREFIX + "fits", 1)) - 1) // world_size
        return cls(store, world_size, f"{_PREFIX}{fit}/")

    def stop_here(self, step: int) -> bool:
        """At the boundary after optimizer step `step`: whether every rank stops now."""
        if self.target is None:
            self.target = self._raise_to(step)
            if self.target is None and not self._joined:
                self._joined = True
                if int(self._store.add(self._count_key, 1)) == self._world_size:
                    self.target = self._seal(step)
        if self.target is not None and step > self.target:  # the argument above says this cannot happen
            raise RuntimeError(
                f"The ranks agreed to stop after step {self.target}, but this rank is already at step {step}."
            )
        return self.target is not None and step >= self.target

    def all_skip(self, step: int, wait_s: float) -> bool:
        """This rank's micro-batch that syncs the gradients of optimizer step `step` returned
        no loss: whether every rank's did, so none of them waits in DDP's all-reduce (the
        others are waiting in it when they did not). Waits up to `wait_s` seconds for them."""
        key = f"{self._skip_prefix}{step}"
        count, deadline = int(self._store.add(key, 1)), time.monotonic() + wait_s
        while count < self._world_size and time.monotonic() < deadline:
            time.sleep(0.01)
            count = int(self._store.add(key, 0))
        return count >= self._world_size

    def _raise_to(self, step: int) -> int | None:
        """The open value up to `step` at least; the target once sealed."""
        value = self._store.compare_set(self._key, "", str(step)).decode()  # sets it when absent
        while True:
            if value.startswith(_SEALED):
                return int(value[len(_SEALED):])
            if int(value) >= step:
                return None
            seen = self._store.compare_set(self._key, value, str(step)).decode()
            if seen == str(step):
                return None
            value = seen

    def _seal(self, step: int) -> int:
        value = self._store.compare_set(self._key, "", str(step)).decode()
        while not value.startswith(_SEALED):
            sealed = f"{_SEALED}{max(int(value), step) + 1}"
            seen = self._store.compare_set(self._key, value, sealed).decode()
            value = sealed if seen == sealed else seen
        return int(value[len(_SEALED):])


def count_in(store: Any, key: str, world_size: int, wait_s: float) -> bool:
    """Count this rank in at `key`; whether all `world_size` ranks are in within `wait_s`
    seconds (a store that fails answers False: its holder, rank 0's agent, is gone)."""
    try:
        count, deadline = int(store.add(key, 1)), time.monotonic() + wait_s
        while count < world_size and time.monotonic() < deadline:
            time.sleep(0.02)
            count = int(store.add(key, 0))
    except Exception:  # noqa: BLE001 - an unreachable store: nobody to meet
        return False
    return count >= world_size
