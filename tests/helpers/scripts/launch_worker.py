"""`Trainer(devices=2)` run plainly, for how the job ends (tests/strategies/test_launcher.py).

Each rank writes OUT/pid_rank{r} once its Trainer is built; rank 0 also writes
OUT/signals.txt: its SIGINT and SIGTERM handlers before and after the Trainer started rank 1.

Usage: python launch_worker.py OUT MODE
    MODE ok: a short fit; fail0: rank 0 raises at optimizer step 2; long: a fit that runs
    until the test interrupts it (OUT/training appears once it trains); stall1: rank 1
    sleeps outside any collective at step 2 (OUT/stalled appears), for a minute;
    before0: rank 0 raises after building its Trainer, before fit (rank 1 waits in fit); fail1: rank 1
    raises at step 2 while rank 0 sleeps outside any collective for a minute.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data
from trainer import Trainer

out, mode = Path(sys.argv[1]), sys.argv[2]


def handlers() -> str:
    return " ".join(repr(signal.getsignal(sig)) for sig in (signal.SIGINT, signal.SIGTERM))


class Net(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if mode == "fail0" and self.trainer.global_step == 2 and self.trainer.global_rank == 0:
            raise RuntimeError("rank 0 fails on purpose")
        if mode == "fail1" and self.trainer.global_step == 2:  # rank 1 fails while rank 0 computes (no collective)
            if self.trainer.global_rank == 1:
                raise RuntimeError("rank 1 fails on purpose")
            (out / "stalled").touch()
            time.sleep(60)
        if mode == "stall1" and self.trainer.global_step == 2 and self.trainer.global_rank == 1:
            (out / "stalled").touch()
            time.sleep(60)
        if mode == "long":
            (out / "training").touch()
            time.sleep(0.02)
        return super().training_step(batch, batch_idx)


before = handlers()
trainer = Trainer(devices=2, strategy="ddp", device="cpu", max_epochs=2 if mode in ("ok", "fail0", "fail1") else 10_000, seed=3,
                  logger=False, enable_progress_bar=False, enable_checkpointing=False)
rank = trainer.global_rank
(out / f"pid_rank{rank}").write_text(str(os.getpid()))
if rank == 0:
    (out / "signals.txt").write_text(f"{before} | {handlers()}")
if mode == "before0" and rank == 0:
    raise RuntimeError("rank 0 fails before fit")
trainer.fit(Net(lr=0.001), DataLoader(make_data(32), batch_size=4))
