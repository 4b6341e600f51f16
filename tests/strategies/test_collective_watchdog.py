"""The collective watchdog when the job's store (held by rank 0) stops answering: rank 0 or its
machine is gone, so no collective can succeed again. A rank stuck outside any collective (NCCL's
own watchdog only ends ranks waiting in one) must end too, after the timeout, saying why,
instead of keeping its GPUs until the allocation's time limit."""

from __future__ import annotations

import datetime
import time

import trainer.strategies.collectives as collectives
from trainer.strategies.collectives import CollectiveGuard


class GoneStore:
    """rank 0's store after rank 0 died: every request fails."""

    def clone(self) -> GoneStore:
        return self

    def set_timeout(self, timeout: datetime.timedelta) -> None: ...

    def check(self, keys: list[str]) -> bool:
        raise RuntimeError("Connection reset by peer")


def test_a_rank_ends_when_the_store_has_been_gone_longer_than_the_timeout(monkeypatch):
    monkeypatch.setattr(collectives, "POLL_S", 0.05)
    ended: list[str] = []
    guard = CollectiveGuard(rank=1, world_size=2, timeout=datetime.timedelta(seconds=0.5), owner="DDP")
    monkeypatch.setattr(guard, "_end", ended.append)
    started = time.monotonic()
    guard.start(GoneStore())
    deadline = started + 10
    while not ended and time.monotonic() < deadline:
        time.sleep(0.05)
    guard.stop()
    assert ended, "the watchdog went on polling a store that is gone"
    assert time.monotonic() - started >= 0.5  # not before the timeout
    assert "Rank 1 of 2: the job's key-value store, which rank 0 holds, has not answered" in ended[0]
    assert "DDP(timeout=0.5)" in ended[0] and "It was " in ended[0]
