"""EMA weight averaging under 2 processes (Gloo): the Trainer (DDP) against a hand-written
DDP loop that updates an AveragedModel after every optimizer step that stepped.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 ema_worker.py OUT_DIR
Each rank saves OUT_DIR/ema_rank{r}.pt; tests/callbacks/test_weight_averaging.py checks the numbers.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import callbacks
from tests.helpers.reference import DTYPES, TinyNet, make_data, make_model, weights
from trainer import Trainer
from trainer.precision import AMP

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
SCALER = {"init_scale": 2.0**10}
BLOW_UP = {"fp32": (), "amp": (3,)}  # amp: an overflow on both ranks, skipped by the GradScaler


def loader() -> DataLoader:
    data = make_data(36)
    return DataLoader(data, batch_size=4, sampler=DistributedSampler(data, num_replicas=WORLD, rank=RANK, shuffle=True, seed=3))


class Step(torch.nn.Module):
    def __init__(self, model: TinyNet) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Any, index: int) -> torch.Tensor:
        return self.model.training_step(batch, index)


def by_hand(precision: str, epochs: int = 2) -> dict[str, Any]:
    model = make_model(blow_up_at=BLOW_UP[precision])
    ema = AveragedModel(model, avg_fn=get_ema_avg_fn(0.9), use_buffers=True)
    torch.manual_seed(1)
    ddp = DistributedDataParallel(Step(model))
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp", **SCALER)
    dtype, data, skipped = DTYPES[precision], loader(), 0
    for epoch in range(epochs):
        data.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        for i, batch in enumerate(data):
            with torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext():
                loss = ddp(batch, i)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            stepped = precision != "amp" or scaler.get_scale() >= before
            opt.zero_grad(set_to_none=True)
            if stepped:
                ema.update_parameters(model)
            skipped += not stepped
    return {"average": weights(ema.module), "training": weights(model), "n": int(ema.n_averaged), "skipped": skipped}


def main() -> None:
    out = Path(sys.argv[1])
    results: dict[str, Any] = {}
    for precision in ("fp32", "amp"):
        model, averaging = make_model(blow_up_at=BLOW_UP[precision]), callbacks.EMAWeightAveraging(decay=0.9)
        torch.manual_seed(1)
        trainer = Trainer(
            precision=AMP(**SCALER) if precision == "amp" else precision, max_epochs=2, strategy="ddp", device="cpu",
            enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, callbacks=[averaging],
            root_dir=out / precision, log_every_n_steps=2,  # rank 0 counts FLOPs on its first micro-batch, rank 1 does not
        )
        trainer.fit(model, loader())
        hand = by_hand(precision)
        assert averaging.average_model is not None
        results[precision] = {
            "average": weights(model), "training": weights(averaging.average_model.module),
            "n_averaged": int(averaging.average_model.n_averaged), "hand_average": hand["average"],
            "hand_training": hand["training"], "hand_n_averaged": hand["n"], "skipped": trainer.state.skipped_steps, "flops_per_sample": trainer._run.output.throughput.flops_per_sample,
        }
    torch.save(results, out / f"ema_rank{RANK}.pt")


if __name__ == "__main__":
    main()
