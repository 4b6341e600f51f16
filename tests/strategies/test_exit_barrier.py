"""The exit barrier (where the ranks meet before the process group is released) is bounded by
`DDP(timeout=...)` like every other collective of the Trainer: a rank that stalls in
`on_fit_end` keeps the others no longer than the timeout, is named, and is ended itself.
Two srun-like tasks on Gloo over loopback (the helpers of test_slurm.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from tests.strategies.test_slurm import _finish, _wait_for, start_slurm_job

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")

TIMEOUT_S = 5.0


@pytest.mark.slow
@pytest.mark.parametrize("stalled,strategy", [(1, "ddp"), (0, "ddp"), (1, "fsdp")])
def test_a_rank_stalled_in_on_fit_end_is_named_and_ended_within_the_timeout(tmp_path: Path, stalled: int,
                                                                            strategy: str) -> None:
    waits = 1 - stalled
    # requeue=off: no requeue agreement after fit, so the exit barrier is the only collective left
    job = start_slurm_job("stall", tmp_path, tmp_path / "runs", f"timeout={TIMEOUT_S}", f"stall_rank={stalled}",
                          "where=fit_end", "requeue=off", f"strategy={strategy}")
    _wait_for(tmp_path / "stalled", job)
    stalled_at = float((tmp_path / "stalled").read_text())
    ended: dict[int, float] = {}
    deadline = time.monotonic() + TIMEOUT_S + 20
    while len(ended) < 2 and time.monotonic() < deadline:
        for rank, process in enumerate(job):
            if rank not in ended and process.poll() is not None:
                ended[rank] = time.time() - stalled_at
        time.sleep(0.05)
    for process in job:  # still waiting (the stall lasts 120 s): ended here, the test fails below
        if process.poll() is None:
            process.kill()
    results = _finish(job)
    assert set(ended) == {0, 1} and max(ended.values()) < TIMEOUT_S + 10, (ended, [e[-3000:] for _, _, e in results])
    waiting = results[waits][2]
    assert (tmp_path / f"stall_rank{waits}.pt").exists()  # it finished its fit and went on to exit
    assert f"Rank {waits} of 2 stopped waiting" in waiting and "in the exit barrier" in waiting, waiting[-4000:]
    assert f"{strategy.upper()}(timeout=5)" in waiting
    assert f"rank {stalled} did not arrive: it was at Stalling._stall" in waiting, waiting[-4000:]
    code, _, stuck = results[stalled]
    assert code != 0 and f"Rank {stalled} of 2: rank(s) {waits} gave up waiting" in stuck, stuck[-4000:]
    assert "on_fit_end" in stuck  # its stack shows where it was


def test_ranks_that_failed_together_count_each_other_in_at_exit() -> None:
    """A rank that failed waits (bounded) for the others at exit through the store: when they
    all come (an error every rank raised together) they meet in the exit barrier; alone, it
    goes on after the wait. The store is torch's own (a HashStore, as the job's TCPStore)."""
    import threading

    from trainer.strategies.agreement import count_in

    store = torch.distributed.HashStore()
    late = threading.Timer(0.3, lambda: count_in(store, "exit/0", 2, wait_s=0.0))
    late.start()
    started = time.monotonic()
    assert count_in(store, "exit/0", 2, wait_s=20.0)  # the other rank came 0.3 s later
    assert time.monotonic() - started < 15
    late.join()
    started = time.monotonic()
    assert not count_in(store, "exit/1", 2, wait_s=0.2)  # alone: bounded
    assert time.monotonic() - started < 10

    class Gone:
        def add(self, key: str, value: int) -> int:
            raise RuntimeError("Connection reset by peer")

    assert not count_in(Gone(), "exit/0", 2, wait_s=5.0)  # the store's holder has exited
