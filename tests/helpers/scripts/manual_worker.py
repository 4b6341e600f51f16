"""Manual optimization under DDP (2 processes, Gloo): a GAN through the Trainer against the
same GAN written by hand with its gradients all-reduced after each backward.

Usage: python -m torch.distributed.run --standalone --nproc_per_node=2 manual_worker.py OUT_DIR
Each rank saves OUT_DIR/manual_rank{r}.pt with both runs' weights per case.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from tests.helpers.gan import DTYPES, GAN, Z, bce, discriminator, make_points
from tests.helpers.reference import weights
from trainer import Trainer

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


class DDPGAN(GAN):
    """The tests' GAN without BatchNorm (DDP would broadcast its buffers), accumulating the
    discriminator's gradients over `accumulate` batches with DDP's sync only on the last."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.generator = torch.nn.Sequential(torch.nn.Linear(Z, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.discriminator = discriminator()

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        opt_g, opt_d = self.optimizers()
        (real,) = batch
        fake = self.generator(torch.randn(real.shape[0], Z))
        boundary = (batch_idx + 1) % self.accumulate == 0
        with opt_d.toggle_model(sync_grad=boundary):
            d_loss = (bce(self.discriminator(real), 1.0) + bce(self.discriminator(fake.detach()), 0.0)) / self.accumulate
            if self.calls in self.blow_up_at and RANK == 0:
                d_loss = d_loss * float("inf")
            self.manual_backward(d_loss)
            if boundary:
                opt_d.step()
                opt_d.zero_grad()
        with opt_g.toggle_model():
            self.manual_backward(bce(self.discriminator(fake), 1.0))
            opt_g.step()
            opt_g.zero_grad()
        self.calls += 1


def loader() -> DataLoader:
    data = make_points(48)
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=RANK, shuffle=True, seed=3)
    return DataLoader(data, batch_size=4, sampler=sampler)  # 6 batches per rank


def new_model(**kwargs: Any) -> DDPGAN:
    torch.manual_seed(0)
    return DDPGAN(**kwargs)


def all_reduce_grads(params: list[torch.nn.Parameter]) -> None:
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(WORLD)


def by_hand(model: DDPGAN, precision: str, epochs: int) -> dict[str, torch.Tensor]:
    G, D = model.generator, model.discriminator
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    dtype = DTYPES[precision]
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext
    data, calls = loader(), 0
    for epoch in range(epochs):
        data.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        for batch_idx, (real,) in enumerate(data):
            boundary = (batch_idx + 1) % model.accumulate == 0
            with autocast():
                fake = G(torch.randn(real.shape[0], Z))
            G.requires_grad_(False)
            with autocast():
                d_loss = (bce(D(real), 1.0) + bce(D(fake.detach()), 0.0)) / model.accumulate
            if calls in model.blow_up_at and RANK == 0:
                d_loss = d_loss * float("inf")
            scaler.scale(d_loss).backward()
            if boundary:
                all_reduce_grads(list(D.parameters()))  # locally accumulated until the step
                scaler.step(opt_d)
                scaler.update()  # before the next backward (the Trainer's lazy update)
                opt_d.zero_grad()
            G.requires_grad_(True)
            D.requires_grad_(False)
            with autocast():
                g_loss = bce(D(fake), 1.0)
            scaler.scale(g_loss).backward()
            # DDP's reducer covers the whole module: a synced backward also averages the
            # discriminator's locally accumulated gradients (same average, other rounding).
            all_reduce_grads(list(G.parameters()) + list(D.parameters()))
            scaler.step(opt_g)
            opt_g.zero_grad()
            D.requires_grad_(True)
            scaler.update()  # after the generator's step
            calls += 1
    return weights(model)


def main() -> None:
    out = Path(sys.argv[1])
    results: dict[str, Any] = {}
    for name, precision, options in (
        ("fp32", "fp32", {}),
        ("amp-overflow", "amp", {"blow_up_at": (2,)}),
        ("fp32-accumulate", "fp32", {"accumulate": 2}),
    ):
        model = new_model(**options)
        torch.manual_seed(1)
        trainer = Trainer(precision=precision, max_epochs=2, strategy="ddp", device="cpu", logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0)
        trainer.fit(model, loader())
        reference = new_model(**options)
        torch.manual_seed(1)
        results[name] = {
            "trainer": weights(model),
            "hand": by_hand(reference, precision, 2),
            "global_step": trainer.global_step,
            "skipped": trainer.state.skipped_steps,
        }
    torch.save(results, out / f"manual_rank{RANK}.pt")


if __name__ == "__main__":
    main()
