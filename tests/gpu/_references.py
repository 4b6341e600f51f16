"""Hand-written CUDA loops the GPU suite compares the Trainer with, and what its files share.

`cuda_fit` is tests/helpers/reference.py's loop on a GPU (autocast and GradScaler on "cuda", the
batch moved with non_blocking=True, a validation pass at each epoch's end as a
`for epoch: train(); evaluate()` script has); `cuda_gan` is tests/helpers/gan.py's recipe on a GPU.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers.gan import GAN, Z, bce
from tests.helpers.reference import DTYPES
from trainer import Callback

GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")]
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
CUDA = torch.device("cuda")


def autocast(precision: str) -> contextlib.AbstractContextManager[Any]:
    dtype = DTYPES[precision]
    return torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def cuda_fit(model: Any, train: DataLoader, *, precision: str = "fp32", epochs: int = 1, accumulate: int = 1,
             clip: float | None = None, val: DataLoader | None = None) -> dict[str, Any]:
    """The hand-written loop; returns each epoch's validation loss (the mean over samples)."""
    model.to(CUDA)
    opt = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "amp")
    val_losses: list[float] = []
    for _ in range(epochs):
        model.train()
        n = len(train)
        for i, (x, y) in enumerate(train):
            x, y = x.to(CUDA, non_blocking=True), y.to(CUDA, non_blocking=True)
            start = (i // accumulate) * accumulate
            window = min(accumulate, n - start)
            with autocast(precision):
                loss = model.training_step((x, y), i)
            scaler.scale(loss / window).backward()
            if i - start + 1 < window:
                continue
            scaler.unscale_(opt)
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        if val is not None:
            model.eval()
            total, count = torch.zeros((), device=CUDA), 0
            with torch.no_grad():
                for x, y in val:
                    x, y = x.to(CUDA, non_blocking=True), y.to(CUDA, non_blocking=True)
                    with autocast(precision):
                        total += torch.nn.functional.mse_loss(model(x).float(), y) * len(x)
                    count += len(x)
            val_losses.append(float(total / count))
    return {"val": val_losses, "scale": scaler.get_scale() if precision == "amp" else None}


def cuda_gan(model: GAN, loader: DataLoader, *, precision: str = "fp32", epochs: int = 1) -> dict[str, Any]:
    """tests/helpers/gan.py's reference_gan on a GPU (one GradScaler, schedulers held on skipped steps)."""
    model.to(CUDA)
    G, D = model.generator, model.discriminator
    (opt_g, opt_d), (sched_g, sched_d) = model.configure_optimizers()
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "amp")
    model.train()

    def step(opt: torch.optim.Optimizer) -> bool:
        scaler.step(opt)
        stepped = True
        if precision == "amp":
            found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
            stepped = not any(bool(t.item()) for t in found.values())
        scaler.update()
        return stepped

    for _ in range(epochs):
        for batch_idx, (real,) in enumerate(loader):
            real = real.to(CUDA, non_blocking=True)
            boundary = (batch_idx + 1) % model.accumulate == 0
            with autocast(precision):
                fake = G(torch.randn(real.shape[0], Z, device=CUDA))
            for p in G.parameters():
                p.requires_grad_(False)
            with autocast(precision):
                d_loss = (bce(D(real), 1.0) + bce(D(fake.detach()), 0.0)) / model.accumulate
            scaler.scale(d_loss).backward()
            if boundary:
                if model.clip is not None:
                    scaler.unscale_(opt_d)
                    torch.nn.utils.clip_grad_norm_(D.parameters(), model.clip)
                if step(opt_d):
                    sched_d.step()
                opt_d.zero_grad()
            for p in G.parameters():
                p.requires_grad_(True)
            for p in D.parameters():
                p.requires_grad_(False)
            with autocast(precision):
                g_loss = bce(D(fake), 1.0)
            scaler.scale(g_loss).backward()
            if step(opt_g):
                sched_g.step()
            opt_g.zero_grad()
            for p in D.parameters():
                p.requires_grad_(True)
    return {"scale": scaler.get_scale() if precision == "amp" else None}


class SaveAt(Callback):
    """Writes a checkpoint after optimizer step `step` (a clean cut, mid-epoch when it is)."""

    def __init__(self, step: int, path: Any) -> None:
        self.step, self.path = step, path

    def on_train_step_end(self, trainer: Any, module: Any, stepped: bool) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)
