"""pytorch/examples' language_translation at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_language_translation.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

nn.Transformer seq2seq (sequence-first), sinusoidal positions with dropout, padded batches
with causal and padding masks, CrossEntropyLoss(ignore_index=<pad>), Adam(betas=(0.9,
0.98), eps=1e-9), unshuffled loaders. The script validates *without* torch.no_grad() and
averages its losses over `len(list(loader))`, which iterates each loader once more.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tests.helpers.examples import autocast_for, scaler_for
from trainer import Module


PAD, BOS, EOS = 1, 2, 3


SRC_VOCAB, TGT_VOCAB = 11, 13


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 64) -> None:
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


def generate_square_subsequent_mask(size: int) -> torch.Tensor:
    mask = (torch.triu(torch.ones((size, size))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))


def create_mask(src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, ...]:
    tgt_mask = generate_square_subsequent_mask(tgt.shape[0])
    src_mask = torch.zeros((src.shape[0], src.shape[0])).type(torch.bool)
    return src_mask, tgt_mask, (src == PAD).transpose(0, 1), (tgt == PAD).transpose(0, 1)


class Translator(Module):
    def __init__(self, label_smoothing: float = 0.0, embed_size: int = 16, dropout: float = 0.1) -> None:
        super().__init__()
        self.src_embedding = nn.Embedding(SRC_VOCAB, embed_size)
        self.tgt_embedding = nn.Embedding(TGT_VOCAB, embed_size)
        self.pos_enc = PositionalEncoding(embed_size, dropout)
        self.transformer = nn.Transformer(d_model=embed_size, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=32, dropout=dropout)
        self.ff = nn.Linear(embed_size, TGT_VOCAB)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=label_smoothing)
        self.loaders: tuple[DataLoader, DataLoader] | None = None  # the script's train_dl, valid_dl
        self.train_losses: list[float] = []
        self.val_losses: list[float] = []

    def forward(self, src: torch.Tensor, trg: torch.Tensor, *masks: torch.Tensor) -> torch.Tensor:
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask = masks
        outs = self.transformer(self.pos_enc(self.src_embedding(src)), self.pos_enc(self.tgt_embedding(trg)), src_mask,
                                tgt_mask, None, src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.ff(outs)

    def loss(self, batch: Any) -> torch.Tensor:
        src, tgt = batch
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = self(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        tgt_out = tgt[1:, :]
        return self.loss_fn(logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))

    # The port.
    def on_train_epoch_start(self) -> None:
        self.losses = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.losses += loss.item()
        return loss

    def on_train_epoch_end(self) -> None:
        assert self.loaders is not None
        self.train_losses.append(self.losses / len(list(self.loaders[0])))

    def on_validation_epoch_start(self) -> None:
        self.val_sum = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = self.loss(batch)
        self.val_sum += loss.item()
        self.log("val/loss", loss)

    def on_validation_epoch_end(self) -> None:
        assert self.loaders is not None
        self.val_losses.append(self.val_sum / len(list(self.loaders[1])))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)


class Sentences(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.pairs = []
        for _ in range(n):
            src_len, tgt_len = (int(v) for v in torch.randint(2, 7, (2,), generator=g))
            src = torch.randint(4, SRC_VOCAB, (src_len,), generator=g)
            tgt = torch.randint(4, TGT_VOCAB, (tgt_len,), generator=g)
            self.pairs.append((torch.cat([torch.tensor([BOS]), src, torch.tensor([EOS])]),
                               torch.cat([torch.tensor([BOS]), tgt, torch.tensor([EOS])])))

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pairs[i]


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    src_batch, tgt_batch = zip(*batch)
    return (torch.nn.utils.rnn.pad_sequence(list(src_batch), padding_value=PAD),
            torch.nn.utils.rnn.pad_sequence(list(tgt_batch), padding_value=PAD))


def make_translator(label_smoothing: float) -> Translator:
    torch.manual_seed(0)
    model = Translator(label_smoothing)
    model.loaders = (DataLoader(Sentences(24, 6), batch_size=6, collate_fn=collate),
                     DataLoader(Sentences(10, 7), batch_size=6, collate_fn=collate))
    return model


def original_translation(precision: str, label_smoothing: float, epochs: int = 2) -> Translator:
    model = make_translator(label_smoothing)
    assert model.loaders is not None
    train_dl, valid_dl = model.loaders
    autocast, scaler = autocast_for(precision), scaler_for(precision)
    optim = model.configure_optimizers()

    def train() -> float:
        losses = 0.0
        model.train()
        for batch in train_dl:
            with autocast():
                loss = model.loss(batch)
            optim.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optim)
            scaler.update()
            losses += loss.item()
        return losses / len(list(train_dl))

    def validate() -> float:
        losses = 0.0
        model.eval()
        for batch in valid_dl:  # no torch.no_grad(): as the example
            with autocast():
                losses += model.loss(batch).item()
        return losses / len(list(valid_dl))

    for _ in range(epochs):
        model.train_losses.append(train())
        model.val_losses.append(validate())
    return model
