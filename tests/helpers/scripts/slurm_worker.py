"""One training job as `srun python train.py` would run it (or under torchrun, for comparison).

Usage: slurm_worker.py MODE OUT ROOT [key=value ...]   (tests/strategies/test_slurm.py starts it)

The process learns its rank from the Trainer (SLURM's variables, or torchrun's), never from
the environment itself. MODE:

- "train": the job with checkpoints under ROOT, uninterrupted (`ckpt=last` resumes it);
- "signal": the same job; inside optimizer step 6 the rank `signal_rank` tells the test
  (OUT/handshake) and holds the step until the test's signal has reached it;
- "stall": DDP(timeout=`timeout`) (FSDP's with `strategy=fsdp`); the rank `stall_rank` sleeps for 120 s inside its
  training step 4 (`where=step`), at the end of epoch 0 (`where=epoch_end`) or in
  `on_fit_end` (`where=fit_end`: the others then wait at the exit barrier), after writing
  OUT/stalled with the time it started.

Options `async=on` and `keep=k` give Trainer(async_checkpointing=True, keep_last_checkpoints=k).

Each rank writes OUT/MODE_rank{r}.pt: weights, global step, what the strategy is.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data, weights
from trainer import Callback, Trainer
from trainer.distributed import DDP, FSDP

MODE, OUT, ROOT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
OPTIONS = dict(item.split("=", 1) for item in sys.argv[4:])


class HoldUntilSignalled(Callback):
    """On rank `rank`, inside step 6: tell the test, then wait until its signal arrived, so
    the stop request lands in step 6 on every machine."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.strategy.rank == self.rank and trainer.global_step == 5:
            (OUT / "handshake").touch()
            deadline = time.monotonic() + 60
            while not trainer._run.preempted and time.monotonic() < deadline:
                time.sleep(0.01)


class Stalling(TinyNet):
    """TinyNet whose rank `stall_rank` stops answering: inside a training step, or at an epoch's end."""

    def __init__(self, stall_rank: int, where: str) -> None:
        super().__init__(dropout=0.1)
        self.stall_rank, self.where = stall_rank, where

    def _stall(self) -> None:
        if self.trainer.strategy.rank == self.stall_rank:
            partial = OUT / "stalled.partial"  # renamed when whole: the test reads it as soon as it exists
            partial.write_text(repr(time.time()))
            partial.rename(OUT / "stalled")
            time.sleep(120)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.where == "step" and self.trainer.global_step == 3:
            self._stall()
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        if self.where == "epoch_end":
            self._stall()

    def on_fit_end(self) -> None:
        if self.where == "fit_end":
            self._stall()


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    callbacks: list[Callback] = []
    strategy: Any = "auto"
    model: TinyNet = TinyNet(dropout=0.1)
    if MODE == "signal":
        callbacks.append(HoldUntilSignalled(int(OPTIONS.get("signal_rank", "1"))))
    if MODE == "stall":
        kind = FSDP if OPTIONS.get("strategy") == "fsdp" else DDP
        strategy = kind(timeout=float(OPTIONS["timeout"]))
        torch.manual_seed(0)
        model = Stalling(int(OPTIONS.get("stall_rank", "1")), OPTIONS.get("where", "step"))
    requeue = {"on": True, "off": False}.get(OPTIONS.get("requeue", ""))
    trainer = Trainer(
        max_epochs=2, seed=7, logger=False, enable_progress_bar=False, log_every_n_steps=4, device="cpu",
        num_sanity_val_steps=0, strategy=strategy, root_dir=ROOT, callbacks=callbacks, requeue=requeue,
        async_checkpointing=OPTIONS.get("async") == "on", keep_last_checkpoints=int(OPTIONS.get("keep", "1")),
    )
    trainer.fit(model, DataLoader(make_data(40), batch_size=4, shuffle=True), ckpt_path=OPTIONS.get("ckpt"))
    strategy_seen = trainer.strategy
    rank = strategy_seen.rank
    torch.save(
        {"weights": weights(model), "global_step": trainer.global_step, "rank": rank,
         "world_size": strategy_seen.world_size, "strategy": type(strategy_seen).__name__},
        OUT / f"{MODE}_rank{rank}.pt",
    )
    print(f"rank {rank} of {strategy_seen.world_size}: global_step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
