"""`Trainer(devices=2)` in a script (tests/strategies/test_devices.py): run plainly, it starts rank 1
itself; under torchrun it changes nothing. Each rank writes OUT/RUN_rank{r}.pt (its weights and
CPU threads).

Usage: python devices_worker.py OUT RUN [FAIL_RANK]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.reference import TinyNet, make_data, weights
from trainer import Trainer

out, run = Path(sys.argv[1]), sys.argv[2]
fail_rank = int(sys.argv[3]) if len(sys.argv) > 3 else -1


class Net(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == 2 and int(os.environ["RANK"]) == fail_rank:
            raise RuntimeError(f"rank {fail_rank} fails on purpose")
        return super().training_step(batch, batch_idx)


trainer = Trainer(devices=2, strategy="ddp", device="cpu", max_epochs=2, seed=3, logger=False,
                  enable_progress_bar=False, enable_checkpointing=False)
torch.manual_seed(0)
net = Net(dropout=0.1)
data = make_data(32)
sampler = DistributedSampler(data, shuffle=True, seed=5)  # before fit: the Trainer made the group
trainer.fit(net, DataLoader(data, batch_size=4, sampler=sampler))
torch.save({"weights": weights(net), "pid": os.getpid(), "rank": trainer.global_rank, "world": trainer.world_size,
            "threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS")},
           out / f"{run}_rank{os.environ['RANK']}.pt")
