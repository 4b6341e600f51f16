"""DDP's options through `Trainer(strategy=DDP(...))` under `torchrun --nproc_per_node=2`.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 options.py OUT_DIR
Each rank saves what `DistributedDataParallel` received and the trained weights;
tests/strategies/test_ddp_options.py checks them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.helpers.reference import TinyNet, make_data, weights
from trainer import Callback, Trainer
from trainer.distributed import DDP

RANK = int(os.environ["RANK"])


class Inspect(Callback):
    """Records the options of the DistributedDataParallel wrapper when fit starts."""

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        ddp = trainer.strategy._ddp
        self.seen = {
            "find_unused_parameters": ddp.find_unused_parameters,
            "static_graph": ddp.static_graph,
            "gradient_as_bucket_view": ddp.gradient_as_bucket_view,
            "bucket_bytes_cap": ddp.bucket_bytes_cap,
        }


class WithUnused(TinyNet):
    """A parameter that never takes part in the loss."""

    def __init__(self) -> None:
        super().__init__(dropout=0.0)
        self.unused = torch.nn.Linear(2, 2)


def fit(strategy: DDP, net: Any = None) -> dict[str, Any]:
    torch.manual_seed(0)
    net = net if net is not None else TinyNet(dropout=0.0)
    inspect = Inspect()
    t = Trainer(strategy=strategy, device="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                max_epochs=2, callbacks=[inspect])
    t.fit(net, DataLoader(make_data(32), batch_size=4))
    return {"seen": inspect.seen, "weights": weights(net), "global_step": t.global_step}


def main() -> None:
    out = Path(sys.argv[1])
    results = {
        "plain": fit(DDP()),
        "options": fit(DDP(static_graph=True, gradient_as_bucket_view=True, bucket_cap_mb=1)),
        "fp16": fit(DDP(comm_hook="fp16")),
        "unused": fit(DDP(find_unused_parameters=True), WithUnused()),
    }
    try:  # last: both ranks fail at the same point, the group stays usable but this model is done
        fit(DDP(), WithUnused())
        results["unused_without_option"] = "no error"
    except RuntimeError as error:
        results["unused_without_option"] = str(error)
    torch.save(results, out / f"options_rank{RANK}.pt")


if __name__ == "__main__":
    main()
