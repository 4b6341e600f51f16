"""`training_step` returning None under DDP: `torchrun --nproc_per_node=2 skip_worker.py OUT WHO`.

WHO "all": every rank returns None for batch 2 (a consistent skip: the run goes on);
"one": rank 1 only (it must fail at once with an error that says so, not hang).
Each rank that finishes writes OUT/rank{r}.txt with its global step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data
from trainer import Trainer
from trainer.distributed import DDP

OUT, WHO = Path(sys.argv[1]), sys.argv[2]
RANK = int(os.environ["RANK"])


class Skipping(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx == 2 and (WHO == "all" or RANK == 1):
            return None
        return super().training_step(batch, batch_idx)


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    trainer = Trainer(max_steps=5, strategy=DDP(timeout=20), device="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0)
    trainer.fit(Skipping(dropout=0.0), DataLoader(make_data(40), batch_size=4))
    (OUT / f"rank{RANK}.txt").write_text(str(trainer.global_step))


if __name__ == "__main__":
    main()
