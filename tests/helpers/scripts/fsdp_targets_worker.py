"""Float targets under FSDP with amp/bf16 keep their dtype and value (the root does not cast the batch).

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 fsdp_targets_worker.py OUT_DIR
Each rank saves what its training steps saw; tests/strategies/test_fsdp_targets.py checks it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.helpers.reference import TinyNet
from trainer import Trainer
from trainer.distributed import FSDP

RANK = int(os.environ.get("RANK", "0"))
#: Not representable in bfloat16 or float16 (1 + 2**-12), and beyond float16's range (1e6).
TARGETS = (1.0 + 2.0**-12, 1.0e6)


class Seen(TinyNet):
    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.seen: list[tuple[str, str, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        expected = torch.tensor(TARGETS, dtype=torch.float32).expand(len(y), 2)
        self.seen.append((str(x.dtype), str(y.dtype), torch.equal(y, expected)))
        return torch.nn.functional.mse_loss(self(x).float(), y[:, :1])


def main() -> None:
    out = Path(sys.argv[1])
    results = {}
    for precision in ("bf16", "amp"):
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(16, 6), torch.tensor(TARGETS, dtype=torch.float32).repeat(16, 1))
        net = Seen()
        Trainer(strategy=FSDP(), device="cpu", precision=precision, max_steps=2, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, num_sanity_val_steps=0).fit(net, DataLoader(data, batch_size=4))
        results[precision] = net.seen
    torch.save(results, out / f"targets_rank{RANK}.pt")


if __name__ == "__main__":
    main()
