"""Item-weighted accumulation under 2 processes (Gloo): the Trainer (DDP, FSDP) against a
hand-written DDP loop that all-reduces the window's item count before its backward passes.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 items_worker.py OUT_DIR
Each rank saves OUT_DIR/items_rank{r}.pt; tests/loops/test_item_weighted.py checks the numbers.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.items import ItemNet, make_item_model, make_token_data
from tests.helpers.reference import DTYPES, weights
from trainer import Callback, Trainer
from trainer.precision import AMP

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
SCALER = {"init_scale": 2.0**10}
#: (name, strategy, precision, accumulate)
CASES = [
    ("ddp/fp32/4", "ddp", "fp32", 4),
    ("ddp/amp/4", "ddp", "amp", 4),
    ("ddp/fp32/1", "ddp", "fp32", 1),
    ("fsdp/fp32/4", "fsdp", "fp32", 4),
]


def loader() -> DataLoader:
    data = make_token_data(66)  # 33 sequences per rank: 11 batches of 3, windows 4, 4, 3
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=RANK, shuffle=True, seed=3)
    return DataLoader(data, batch_size=3, sampler=sampler)


class Logged(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.state.batches_done == batch_idx + 1:
            self.losses.append(trainer.callback_metrics["train/loss"])


class Step(torch.nn.Module):
    def __init__(self, model: ItemNet) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.summed_loss(batch)


def by_hand(model: ItemNet, precision: str, accumulate: int, epochs: int = 2) -> dict[str, Any]:
    """What a careful user writes: count the window's items, all-reduce the count, then
    forward_i / backward(summed_i / total * world) under no_sync but the last; step."""
    ddp = DistributedDataParallel(Step(model))
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp", **SCALER)
    dtype = DTYPES[precision]
    data, steps, means = loader(), 0, []
    for epoch in range(epochs):
        data.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        batches = iter(data)
        while True:
            window = [batch for _, batch in zip(range(accumulate), batches)]
            if not window:
                break
            total = window[0][2].sum()
            for batch in window[1:]:
                total = total + batch[2].sum()
            dist.all_reduce(total)
            loss_sum = torch.zeros((), dtype=torch.float64)
            for i, batch in enumerate(window):
                sync = contextlib.nullcontext() if i == len(window) - 1 else ddp.no_sync()
                with sync:
                    with torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext():
                        summed, _ = ddp(batch)
                    scaler.scale(summed / total * WORLD).backward()
                loss_sum += summed.detach().double()
            dist.all_reduce(loss_sum)
            means.append(float(loss_sum / total))
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            steps += 1
            if len(window) < accumulate:
                break
    return {"weights": weights(model), "steps": steps, "means": means}


def full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in model.state_dict().items():
        gather = getattr(value, "full_tensor", None)
        out[key] = (gather() if callable(gather) else value).detach().clone()
    return out


def main() -> None:
    out = Path(sys.argv[1])
    results: dict[str, Any] = {}
    for name, strategy, precision, accumulate in CASES:
        model, logged = make_item_model(), Logged()
        torch.manual_seed(1)
        trainer = Trainer(
            precision=AMP(**SCALER) if precision == "amp" else precision, max_epochs=2, accumulate_grad_batches=accumulate,
            strategy=strategy, device="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
            num_sanity_val_steps=0, log_every_n_steps=1, callbacks=[logged],
        )
        trainer.fit(model, loader())
        reference = make_item_model()
        torch.manual_seed(1)
        hand = by_hand(reference, precision, accumulate)
        results[name] = {
            "trainer": full(model),
            "hand": hand["weights"],
            "hand_steps": hand["steps"],
            "global_step": trainer.global_step,
            "logged": logged.losses,
            "global_mean": hand["means"],
        }
    torch.save(results, out / f"items_rank{RANK}.pt")


if __name__ == "__main__":
    main()
