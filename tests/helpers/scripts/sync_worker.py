"""Host reads per optimizer step under DDP, counted as tests/loops/test_hot_path.py counts them.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 sync_worker.py OUT_DIR
Each rank saves {case: {read: count}} for fp32 and bf16 with a plain and a fused optimizer
(and the fused run's weights, with one non-finite loss on rank 1); tests/loops/test_sync_free.py checks them.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data, weights
from trainer import Trainer

RANK = int(os.environ.get("RANK", "0"))
PACKAGE = str(Path(__file__).resolve().parents[3] / "trainer")
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")
STEPS, EVERY = 12, 4


def count_reads() -> Counter[str]:
    counts: Counter[str] = Counter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def wrapper(self: torch.Tensor, *args: Any, __name: str = name, __original: Any = original, **kwargs: Any) -> Any:
            if sys._getframe(1).f_code.co_filename.startswith(PACKAGE):
                counts[__name] += 1
            return __original(self, *args, **kwargs)

        setattr(torch.Tensor, name, wrapper)
    return counts


class Net(TinyNet):
    def __init__(self, fused: bool, blow_up_rank: int = -1) -> None:
        super().__init__(dropout=0.0)
        self.fused, self.blow_up_rank = fused, blow_up_rank

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if RANK == self.blow_up_rank and batch_idx == 2 else loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.01, fused=self.fused)


def fit(counts: Counter[str], precision: str, fused: bool, blow_up_rank: int = -1) -> dict[str, Any]:
    torch.manual_seed(0)
    net = Net(fused, blow_up_rank)
    trainer = Trainer(strategy="ddp", device="cpu", precision=precision, max_steps=STEPS, log_every_n_steps=EVERY,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
                      nonfinite_loss="skip")
    loader = DataLoader(make_data(200), batch_size=4)
    counts.clear()
    trainer.fit(net, loader)
    return {"reads": dict(counts), "weights": weights(net), "skipped": trainer.state.skipped_steps}


def main() -> None:
    out = Path(sys.argv[1])
    counts = count_reads()
    results = {f"{precision}/{'fused' if fused else 'plain'}": fit(counts, precision, fused)
               for precision in ("fp32", "bf16") for fused in (False, True)}
    results["skip/fused"] = fit(counts, "fp32", True, blow_up_rank=1)
    results["skip/plain"] = fit(counts, "fp32", False, blow_up_rank=1)
    torch.save(results, out / f"sync_rank{RANK}.pt")


if __name__ == "__main__":
    main()
