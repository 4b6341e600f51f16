"""A GRU encoder-decoder that learns to reverse integer sequences of varying length: padded
batches from a custom `collate_fn`, teacher forcing drawn from torch's random stream,
`gradient_clip_val`, `accumulate_grad_batches=3` over an epoch of 6 batches,
`val_check_interval=0.5`, `self.log(..., sync_dist=True, batch_size=...)`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

import trainer as L

PAD, BOS, VOCAB = 0, 1, 12


def make_sequences(count: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 8, (count,), generator=g)
    return [torch.randint(2, VOCAB, (int(n),), generator=g) for n in lengths]


def collate(sequences: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    source = pad_sequence(sequences, batch_first=True, padding_value=PAD)
    target = pad_sequence([s.flip(0) for s in sequences], batch_first=True, padding_value=PAD)
    return {"source": source, "target": target, "lengths": torch.tensor([len(s) for s in sequences])}


class Seq2Seq(L.LightningModule):
    def __init__(self, hidden: int = 16, teacher_forcing: float = 0.5, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = torch.nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.encoder = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.out = torch.nn.Linear(hidden, VOCAB)

    def forward(self, source: torch.Tensor, target: torch.Tensor, teacher_forcing: float) -> torch.Tensor:
        _, state = self.encoder(self.embed(source))
        token = torch.full((source.shape[0], 1), BOS, dtype=torch.long, device=source.device)
        logits = []
        for t in range(target.shape[1]):
            output, state = self.decoder(self.embed(token), state)
            step_logits = self.out(output)
            logits.append(step_logits)
            use_teacher = torch.rand(()) < teacher_forcing
            token = target[:, t : t + 1] if use_teacher else step_logits.argmax(-1)
        return torch.cat(logits, dim=1)

    def _loss(self, batch: dict[str, torch.Tensor], teacher_forcing: float) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch["source"], batch["target"], teacher_forcing)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), batch["target"].reshape(-1), ignore_index=PAD)
        mask = batch["target"] != PAD
        accuracy = ((logits.argmax(-1) == batch["target"]) & mask).sum() / mask.sum()
        return loss, accuracy

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, _ = self._loss(batch, self.hparams.teacher_forcing)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True, batch_size=batch["source"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss, accuracy = self._loss(batch, 0.0)
        size = batch["source"].shape[0]
        self.log("val_loss", loss, sync_dist=True, batch_size=size, prog_bar=True)
        self.log("val_token_acc", accuracy, sync_dist=True, batch_size=size)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main(root_dir: str | Path, precision: str = "32-true", max_epochs: int = 3) -> dict[str, Any]:
    L.seed_everything(23)
    train = DataLoader(make_sequences(48, 1), batch_size=8, shuffle=True, collate_fn=collate)  # 6 batches
    val = DataLoader(make_sequences(20, 2), batch_size=8, collate_fn=collate)  # 8, 8, 4
    model = Seq2Seq()
    trainer = L.Trainer(
        max_epochs=max_epochs,
        precision=precision,
        default_root_dir=root_dir,
        logger=False,
        enable_checkpointing=False,
        gradient_clip_val=0.5,
        accumulate_grad_batches=3,
        val_check_interval=0.5,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train, val)
    validated = dict(trainer.callback_metrics)
    result = trainer.validate(model, val, verbose=False)[0]
    return {"model": model, "trainer": trainer, "val": validated, "validate": result}
