"""A tiny transformer language model: `nn.TransformerEncoder` with a causal mask and dropout,
gradient accumulation, clipping, a per-step warm-up schedule, and validation twice an epoch."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import trainer as L


class CountingText(Dataset):
    """Sequences of a noisy counting language over `vocab` tokens: next = (token + step) % vocab."""

    def __init__(self, n: int, seq_len: int = 9, vocab: int = 16, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(vocab, (n, 1), generator=g)
        step = torch.randint(1, 3, (n, 1), generator=g)
        self.tokens = (start + step * torch.arange(seq_len)) % vocab
        noise = torch.rand(n, seq_len, generator=g) < 0.1
        self.tokens[noise] = torch.randint(vocab, (int(noise.sum()),), generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        sequence = self.tokens[index]
        return sequence[:-1], sequence[1:]


class PositionalEncoding(torch.nn.Module):
    def __init__(self, dim: int, max_len: int = 64, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = torch.nn.Dropout(dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim)
        table[:, 0::2] = torch.sin(position * div)
        table[:, 1::2] = torch.cos(position * div)
        self.register_buffer("table", table)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.table[: x.size(1)])


class LanguageModel(L.LightningModule):
    def __init__(self, vocab: int = 16, dim: int = 16, heads: int = 2, layers: int = 2, dropout: float = 0.1,
                 lr: float = 3e-3, warmup: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embedding = torch.nn.Embedding(vocab, dim)
        self.position = PositionalEncoding(dim, dropout=dropout)
        layer = torch.nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=dropout, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.decoder = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.size(1))
        hidden = self.encoder(self.position(self.embedding(tokens)), mask=mask, is_causal=True)
        return self.decoder(hidden)

    def _loss(self, batch: Any) -> torch.Tensor:
        inputs, targets = batch
        logits = self(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        warmup = self.hparams.warmup
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main(root_dir: str | Path, precision: str = "32-true") -> dict[str, Any]:
    L.seed_everything(2024)
    train = DataLoader(CountingText(64, seed=1), batch_size=8, shuffle=True)
    val = DataLoader(CountingText(16, seed=2), batch_size=8)
    model = LanguageModel()
    trainer = L.Trainer(
        max_epochs=2,
        precision=precision,
        accumulate_grad_batches=2,
        gradient_clip_val=0.5,
        val_check_interval=4,
        default_root_dir=root_dir,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train, val)
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
