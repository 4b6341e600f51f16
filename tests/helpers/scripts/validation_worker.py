"""Mid-epoch validation under 2 processes: every validation point reports the weighted mean
over the whole validation set, and the ranks agree.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 validation_worker.py STRATEGY OUT_DIR
Each rank counts the set's per-sample losses itself (its own sums, all-reduced here) and
saves them beside what the Trainer reported, in OUT_DIR/rank{r}.pt.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data
from trainer import Callback, Trainer

RANK = int(os.environ["RANK"])


class Counted(TinyNet):
    """Logs val/loss per batch (the Trainer reduces it) and keeps its own sums to check it."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.total = torch.zeros(2, dtype=torch.float64)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        per_sample = ((self(x).float() - y) ** 2).mean(dim=1)
        self.log("val/loss", per_sample.mean())  # batch size inferred from the batch
        if not self.trainer.sanity_checking:
            self.total += torch.tensor([float(per_sample.sum()), float(len(x))], dtype=torch.float64)


class Record(Callback):
    def __init__(self) -> None:
        self.points: list[dict[str, float]] = []

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if trainer.sanity_checking:
            return
        total = module.total.clone()
        dist.all_reduce(total)
        module.total.zero_()
        self.points.append({
            "step": float(trainer.global_step),
            "reported": trainer.callback_metrics["val/loss"],
            "expected": float(total[0] / total[1]),
            "samples": float(total[1]),
        })


def main() -> None:
    strategy, out = sys.argv[1], Path(sys.argv[2])
    torch.manual_seed(0)
    net = Counted()
    record = Record()
    trainer = Trainer(strategy=strategy, device="cpu", max_epochs=2, val_check_interval=3, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, callbacks=[record])
    # 48 samples / 2 ranks / batch 4: 6 batches a rank; the validation set, 14 samples of
    # uneven batches (4, 3 per rank), is split without padding.
    train = DataLoader(make_data(48), batch_size=4, shuffle=True)
    val = DataLoader(make_data(14, seed=5), batch_size=4)
    trainer.fit(net, train, val)
    torch.save(record.points, out / f"rank{RANK}.pt")


if __name__ == "__main__":
    main()
