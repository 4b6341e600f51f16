"""A step-budgeted run as LLM-style scripts write it: `max_steps` (not epochs) with
`val_check_interval` as an int (every N training batches), `limit_val_batches`,
`check_val_every_n_epoch=None`, a per-step cosine schedule (`interval="step"`), `self.global_step`
read in `training_step` for a warm-up factor, `on_train_epoch_start` /
`on_validation_epoch_start` hooks recording when they ran, and `EarlyStopping` with
`stopping_threshold` / `divergence_threshold`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainer as L
from callbacks import EarlyStopping


class TinyLM(L.LightningModule):
    def __init__(self, vocab: int = 11, dim: int = 16, warmup: int = 5, total: int = 40) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.rnn = torch.nn.GRU(dim, dim, batch_first=True)
        self.head = torch.nn.Linear(dim, vocab)
        self.events: list[tuple[str, int, int]] = []

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out)

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        ramp = min(1.0, (self.global_step + 1) / self.hparams.warmup)  # a warm-up on the loss scale
        loss = self.loss(tokens)
        self.log("train_loss", loss, prog_bar=True)
        self.log("ramp", ramp)
        return loss * ramp

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (tokens,) = batch
        self.log("val_loss", self.loss(tokens), prog_bar=True)

    def on_train_epoch_start(self) -> None:
        self.events.append(("train_epoch_start", self.current_epoch, self.global_step))

    def on_validation_epoch_start(self) -> None:
        self.events.append(("val_epoch_start", self.current_epoch, self.global_step))

    def on_validation_epoch_end(self) -> None:
        self.events.append(("val_epoch_end", self.current_epoch, self.global_step))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.1)

        def cosine(step: int) -> float:
            return 0.5 * (1 + math.cos(math.pi * min(step, self.hparams.total) / self.hparams.total))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir: str | Path, precision: str = "32-true", max_steps: int = 23, val_check_interval: int = 4,
         stopping_threshold: float | None = None, divergence_threshold: float | None = None,
         check_val_every_n_epoch: int | None = None) -> dict[str, Any]:
    L.seed_everything(17)
    g = torch.Generator().manual_seed(6)
    start = torch.randint(0, 11, (120, 1), generator=g)
    tokens = (start + torch.arange(9)) % 11  # counting sequences: learnable
    tokens = torch.where(torch.rand(tokens.shape, generator=g) < 0.1, torch.randint(0, 11, tokens.shape, generator=g), tokens)
    model = TinyLM(total=max_steps)
    stopper = EarlyStopping(monitor="val_loss", patience=100, stopping_threshold=stopping_threshold,
                            divergence_threshold=divergence_threshold, check_finite=True)
    trainer = L.Trainer(max_steps=max_steps, val_check_interval=val_check_interval, check_val_every_n_epoch=check_val_every_n_epoch,
                        limit_val_batches=2, num_sanity_val_steps=1, precision=precision, default_root_dir=root_dir,
                        logger=False, callbacks=[stopper], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(TensorDataset(tokens[:80]), batch_size=8, shuffle=True),  # 10 batches an epoch
                DataLoader(TensorDataset(tokens[80:]), batch_size=8))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "events": model.events,
            "stopped_epoch": stopper.stopped_epoch, "wait": stopper.wait_count, "should_stop": trainer.should_stop}
