"""DDP failure scenarios under `torchrun --nproc_per_node=2`: `failure_worker.py MODE RANK OUT`.

MODE raise / nan / kill: the rank RANK raises in training_step, returns a nan loss, or is
killed, at its third batch. MODE uneven-list: rank 0 gets 5 batches, rank 1 gets 4.
MODE uneven-iterable: an IterableDataset yields 4 batches on rank 0 and 6 on rank 1.
MODE bad-count: item-weighted accumulation (4 micro-batches a window); the rank RANK returns
num_items=torch.tensor(-2) at its batch 2.
A rank that finishes writes OUT/rank{r}.pt.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.helpers.reference import TinyNet, make_data, weights
from trainer import Trainer

RANK = int(os.environ["RANK"])
MODE, WHO, OUT = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])


class Net(TinyNet):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if RANK == WHO and batch_idx == 2:
            if MODE == "raise":
                raise RuntimeError(f"boom on rank {RANK}")
            if MODE == "kill":
                os.kill(os.getpid(), 9)
            if MODE == "nan":
                return loss * float("nan")
        return loss


class Counted(Net):
    """Returns {"loss": summed, "num_items": n}; a negative tensor count on rank WHO at batch 2."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        summed = torch.nn.functional.mse_loss(self(x).float(), y, reduction="sum")
        count = torch.tensor(-2) if RANK == WHO and batch_idx == 2 else torch.tensor(len(x))
        return {"loss": summed, "num_items": count}


class Uneven(IterableDataset):
    def __iter__(self) -> Any:
        data = make_data(40)
        for i in range(4 if RANK == 0 else 6):
            yield data[i * 4 : (i + 1) * 4]


def main() -> None:
    torch.manual_seed(0)
    model = Counted(dropout=0.0) if MODE == "bad-count" else Net(dropout=0.0)
    if MODE == "uneven-list":
        data = make_data(40)
        loader: Any = [data[i * 4 : (i + 1) * 4] for i in range(5 if RANK == 0 else 4)]
    elif MODE == "uneven-iterable":
        loader = DataLoader(Uneven(), batch_size=None)
    else:
        loader = DataLoader(make_data(40), batch_size=4)
    trainer = Trainer(max_epochs=2, strategy="ddp", device="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, num_sanity_val_steps=0,
                      accumulate_grad_batches=4 if MODE == "bad-count" else 1)
    trainer.fit(model, loader)
    torch.save({"global_step": trainer.global_step, "weights": weights(model)}, OUT / f"rank{RANK}.pt")


if __name__ == "__main__":
    main()
