"""SIGTERM under DDP with slow steps: `torchrun --nproc_per_node=2 preemption_worker.py OUT ROOT STEP_S`.

Each optimizer step takes STEP_S seconds (a sleep in training_step). When step 3 starts (global
step 2), each rank writes OUT/ready_rank{r} with its pid and keeps going; the test then sends
SIGTERM to every rank, as torchrun and SLURM do. `log_every_n_steps=50` and epochs of 50 steps:
no logging step or epoch end comes before `max_steps=12`, so only a per-step agreement stops
the run early. Each rank writes OUT/rank{r}.txt: "<global step> <seconds from the signal's step start to fit's end>".
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data
from trainer import Callback, Trainer

OUT, ROOT, STEP_S = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])


class Slow(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(STEP_S)
        return super().training_step(batch, batch_idx)


class Ready(Callback):
    started: float | None = None

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 2 and self.started is None:
            self.started = time.monotonic()
            (OUT / f"ready_rank{trainer.strategy.rank}").write_text(str(os.getpid()))


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ready = Ready()
    trainer = Trainer(max_steps=12, strategy="ddp", device="cpu", logger=False, log_every_n_steps=50,
                      enable_progress_bar=False, num_sanity_val_steps=0, root_dir=ROOT, callbacks=[ready])
    trainer.fit(Slow(dropout=0.0), DataLoader(make_data(400), batch_size=4))
    took = time.monotonic() - (ready.started or time.monotonic())
    (OUT / f"rank{trainer.strategy.rank}.txt").write_text(f"{trainer.global_step} {took:.2f}")


if __name__ == "__main__":
    main()
