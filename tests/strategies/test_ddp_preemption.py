"""SIGTERM under DDP is acted on at the next optimizer-step boundary, not at the next logging
step: with 2-second steps and `log_every_n_steps=50` the checkpoint is written one step after
the step the signal landed in (torchrun and SLURM kill 30 s after SIGTERM).

Also the agreement itself (trainer/strategies/agreement.py) against a real TCPStore, with
ranks reaching their boundaries in every order.
"""

from __future__ import annotations

import datetime
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.launch import ROOT, torchrun_command, torchrun_env
from trainer.strategies.agreement import StoreAgreement

WORKER = ROOT / "tests" / "helpers" / "scripts" / "preemption_worker.py"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_sigterm_on_every_rank_stops_at_the_next_step_boundary(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    command = torchrun_command(WORKER, str(tmp_path), str(runs), "2.0")
    job = subprocess.Popen(command, cwd=tmp_path, env=torchrun_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        ready = [tmp_path / f"ready_rank{r}" for r in range(2)]
        while not all(p.exists() and p.read_text() for p in ready):
            assert job.poll() is None and time.monotonic() < deadline, "the workers never reached step 3"
            time.sleep(0.05)
        time.sleep(0.3)  # inside step 3 on both ranks
        for path in ready:
            os.kill(int(path.read_text()), signal.SIGTERM)
        output, _ = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, output[-5000:]
    results = [(tmp_path / f"rank{r}.txt").read_text().split() for r in range(2)]
    steps = {int(step) for step, _ in results}
    assert len(steps) == 1, f"the ranks stopped at different steps: {results}"
    (step,) = steps
    assert step in (3, 4), f"stopped after step {step}: the signal landed in step 3 ({output[-2000:]})"
    checkpoint = torch.load(next(runs.rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == step


# ----------------------------------------------------------------- the agreement itself
@pytest.fixture
def store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=5), wait_for_workers=False)


def play(store, world: int, schedule: list[tuple[int, int]]) -> dict[int, int]:
    """Ranks reach their boundaries in `schedule`'s order (rank, step); a rank consults from its
    first listed boundary on. Returns the step each rank stops after."""
    agreements = [StoreAgreement.start(store, world) for _ in range(world)]
    stopped: dict[int, int] = {}
    for rank, step in schedule:
        if rank in stopped:
            continue
        if agreements[rank].stop_here(step):
            stopped[rank] = step
    return stopped


@pytest.mark.parametrize("world", [2, 3])
def test_every_order_of_boundaries_agrees_on_one_step(store, world: int) -> None:
    """Each rank joins at a step in 5..7 and then advances; the hosts may be up to two steps apart.
    Every interleaving that keeps each rank's own order must stop every rank after the same step,
    at most one step after the last rank joined."""
    for joins in itertools.product(range(5, 8), repeat=world):
        for lead in itertools.product(range(3), repeat=world):  # how far each host runs ahead per turn
            schedule: list[tuple[int, int]] = []
            position = list(joins)
            for turn in range(12):
                for rank in (range(world) if turn % 2 else reversed(range(world))):
                    for _ in range(1 + lead[rank] * (turn % 2)):
                        schedule.append((rank, position[rank]))
                        position[rank] += 1
            stopped = play(store, world, schedule)
            assert len(stopped) == world and len(set(stopped.values())) == 1, (joins, lead, stopped)
            assert max(stopped.values()) <= max(joins) + 1 + max(lead), (joins, lead, stopped)


def test_a_signal_on_some_ranks_only_is_left_to_the_collective_agreement(store) -> None:
    agreements = [StoreAgreement.start(store, 2) for _ in range(2)]
    assert not any(agreements[0].stop_here(step) for step in range(3, 20))  # rank 1 never had the signal
    assert agreements[0].target is None
