"""`StepTimeBreakdown` under DDP: `torchrun --nproc_per_node=2 step_time_worker.py OUT`.

Two fits in one job: rank 1's collate_fn sleeps ("collate"), then rank 1's forward sleeps
("forward"). Each rank writes OUT/<scenario>_rank<r>.json: the callback's summary, its
per-rank seconds per step, and the step times a separate clock saw between the same
`on_train_batch_end` calls (the callback's must add up to them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate

from callbacks import StepTimeBreakdown
from tests.helpers.reference import TinyNet, make_data
from trainer import Callback, Trainer
from trainer.distributed import DDP

OUT = Path(sys.argv[1])
RANK = int(os.environ["RANK"])
SLEEP = 0.25  # far above this machine's noise: the verdict, not the time, is asserted


class SleepyForward(TinyNet):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if RANK == 1:
            time.sleep(SLEEP)
        return super().forward(x)


def sleepy_collate(items: list[Any]) -> Any:
    if RANK == 1:
        time.sleep(SLEEP)
    return default_collate(items)


class StepEnds(Callback):
    """The wall clock at every optimizer step's end (before the breakdown's own hook)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ends.append(time.perf_counter())


def run(scenario: str) -> None:
    torch.manual_seed(0)
    ends, breakdown = StepEnds(), StepTimeBreakdown(warmup_steps=1)
    module = SleepyForward(dropout=0.0) if scenario == "forward" else TinyNet(dropout=0.0)
    collate = sleepy_collate if scenario == "collate" else None
    trainer = Trainer(max_steps=6, strategy=DDP(timeout=60), device="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0, log_every_n_steps=100,
                      callbacks=[ends, breakdown])
    trainer.fit(module, DataLoader(make_data(48), batch_size=4, collate_fn=collate))
    counted = ends.ends[-breakdown.steps - 1:]
    result = {"summary": breakdown.summary, "per_rank": breakdown.per_rank, "steps": breakdown.steps,
              "wall_per_step": (counted[-1] - counted[0]) / breakdown.steps}
    (OUT / f"{scenario}_rank{RANK}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    torch.set_num_threads(1)
    for name in ("collate", "forward"):
        run(name)
