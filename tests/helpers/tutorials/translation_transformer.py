"""beginner_source/translation_transformer.py ("Language Translation with nn.Transformer"), at
toy size: the tutorial's `train_epoch`/`evaluate` loop (`original`) and its port to a
LightningModule (`main`), written with this package's imports so that `load_file` runs it under
Lightning too.

The tutorial: `nn.Transformer` (sequence-first) between token embeddings with sinusoidal
positions and dropout, source and target padding masks and a causal target mask built per
batch, `CrossEntropyLoss(ignore_index=PAD_IDX)` on the shifted target, Adam with
`betas=(0.9, 0.98), eps=1e-9`; a `collate_fn` adds BOS/EOS and pads with `pad_sequence`; new
unshuffled loaders each epoch; the printed losses are means over batches of `loss.item()`; the
evaluation is in eval mode (with gradients on); finally a greedy translation.

The port: `training_step` and `validation_step` on the same masks; the printed means are
counted from `loss.item()` as the tutorial counts them; the greedy decoding runs in
`predict_step`.

Differences from the tutorial, with no download: Multi30k and spaCy are replaced by random
token sequences over 12-word vocabularies (the special symbols first, as the tutorial's); a
model of width 8 with one layer each side; 2 epochs; no timing; `encode`/`decode` call
`self.transformer.encoder`/`.decoder` (this version of the tutorial names attributes the model
does not have); `torch.use_deterministic_algorithms(True)` is left out (a process-wide switch).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Transformer
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

import trainer as L

UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
SRC_VOCAB_SIZE = TGT_VOCAB_SIZE = 12
EMB_SIZE, NHEAD, FFN_HID_DIM, BATCH_SIZE = 8, 2, 16, 4
NUM_ENCODER_LAYERS = NUM_DECODER_LAYERS = 1
NUM_EPOCHS = 2


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000) -> None:
        super().__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding: Tensor) -> Tensor:
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])  # type: ignore[index]


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor) -> Tensor:
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


def generate_square_subsequent_mask(sz: int) -> Tensor:
    mask = (torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))


def create_mask(src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    src_seq_len, tgt_seq_len = src.shape[0], tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len)).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


class Seq2SeqTransformer(L.LightningModule):
    def __init__(self, num_encoder_layers: int, num_decoder_layers: int, emb_size: int, nhead: int,
                 src_vocab_size: int, tgt_vocab_size: int, dim_feedforward: int = 512, dropout: float = 0.1) -> None:
        super().__init__()
        self.transformer = Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                       dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)
        self.loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
        self.printed: list[str] = []

    def forward(self, src: Tensor, trg: Tensor, src_mask: Tensor, tgt_mask: Tensor, src_padding_mask: Tensor,
                tgt_padding_mask: Tensor, memory_key_padding_mask: Tensor) -> Tensor:
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask,
                                memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor) -> Tensor:
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)

    def batch_loss(self, src: Tensor, tgt: Tensor) -> Tensor:
        """The loss of `train_epoch` and `evaluate`."""
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = self(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        tgt_out = tgt[1:, :]
        return self.loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))

    # the port
    def on_train_epoch_start(self) -> None:
        self.losses = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        loss = self.batch_loss(*batch)
        self.losses += loss.item()
        return loss

    def on_validation_epoch_start(self) -> None:
        self.train_loss = self.losses / self.trainer.num_training_batches
        self.losses = 0.0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        loss = self.batch_loss(*batch)
        self.losses += loss.item()
        self.log("val_loss", loss, batch_size=1)  # the mean over batches, as the tutorial's

    def on_validation_epoch_end(self) -> None:
        val_loss = self.losses / self.trainer.num_val_batches[0]
        self.printed.append(f"Epoch: {self.current_epoch + 1}, Train loss: {self.train_loss:.3f}, Val loss: {val_loss:.3f}")

    def predict_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        return translate(self, batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.0001, betas=(0.9, 0.98), eps=1e-9)


def tensor_transform(token_ids: list[int]) -> Tensor:
    return torch.cat((torch.tensor([BOS_IDX]), torch.tensor(token_ids), torch.tensor([EOS_IDX])))


def collate_fn(batch: list[tuple[list[int], list[int]]]) -> tuple[Tensor, Tensor]:
    src_batch, tgt_batch = [], []
    for src_sample, tgt_sample in batch:
        src_batch.append(tensor_transform(src_sample))
        tgt_batch.append(tensor_transform(tgt_sample))
    return pad_sequence(src_batch, padding_value=PAD_IDX), pad_sequence(tgt_batch, padding_value=PAD_IDX)


def multi30k_like(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        src = torch.randint(4, SRC_VOCAB_SIZE, (int(torch.randint(2, 7, (), generator=g)),), generator=g).tolist()
        tgt = [(token + 1) % SRC_VOCAB_SIZE or 4 for token in src][: max(2, len(src) - 1)]
        pairs.append((src, tgt))
    return pairs


def new_model() -> Seq2SeqTransformer:
    torch.manual_seed(0)
    transformer = Seq2SeqTransformer(NUM_ENCODER_LAYERS, NUM_DECODER_LAYERS, EMB_SIZE, NHEAD, SRC_VOCAB_SIZE,
                                     TGT_VOCAB_SIZE, FFN_HID_DIM)
    for p in transformer.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return transformer


def greedy_decode(model: Seq2SeqTransformer, src: Tensor, src_mask: Tensor, max_len: int, start_symbol: int) -> Tensor:
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long)
    for _ in range(max_len - 1):
        tgt_mask = (generate_square_subsequent_mask(ys.size(0)).type(torch.bool))
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word_tensor = torch.max(prob, dim=1)
        next_word = next_word_tensor.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def translate(model: Seq2SeqTransformer, src_tokens: Tensor) -> Tensor:
    model.eval()
    src = tensor_transform(src_tokens.tolist()).view(-1, 1)
    num_tokens = src.shape[0]
    src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
    return greedy_decode(model, src, src_mask, max_len=num_tokens + 5, start_symbol=BOS_IDX).flatten()


SENTENCE = torch.tensor([5, 6, 7, 8])


def original(epochs: int = NUM_EPOCHS) -> tuple[Seq2SeqTransformer, Tensor]:
    transformer = new_model()
    optimizer = torch.optim.Adam(transformer.parameters(), lr=0.0001, betas=(0.9, 0.98), eps=1e-9)

    def train_epoch(model: Seq2SeqTransformer) -> float:
        model.train()
        losses = 0.0
        train_dataloader = DataLoader(multi30k_like(20, seed=1), batch_size=BATCH_SIZE, collate_fn=collate_fn)  # type: ignore[arg-type]
        for src, tgt in train_dataloader:
            loss = model.batch_loss(src, tgt)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses += loss.item()
        return losses / len(train_dataloader)

    def evaluate(model: Seq2SeqTransformer) -> float:
        model.eval()
        losses = 0.0
        val_dataloader = DataLoader(multi30k_like(6, seed=2), batch_size=BATCH_SIZE, collate_fn=collate_fn)  # type: ignore[arg-type]
        for src, tgt in val_dataloader:
            losses += model.batch_loss(src, tgt).item()
        return losses / len(val_dataloader)

    for epoch in range(1, epochs + 1):
        train_loss = train_epoch(transformer)
        val_loss = evaluate(transformer)
        transformer.printed.append(f"Epoch: {epoch}, Train loss: {train_loss:.3f}, Val loss: {val_loss:.3f}")
    return transformer, translate(transformer, SENTENCE)


def main(epochs: int = NUM_EPOCHS) -> dict[str, Any]:
    transformer = new_model()
    train_dataloader = DataLoader(multi30k_like(20, seed=1), batch_size=BATCH_SIZE, collate_fn=collate_fn)  # type: ignore[arg-type]
    val_dataloader = DataLoader(multi30k_like(6, seed=2), batch_size=BATCH_SIZE, collate_fn=collate_fn)  # type: ignore[arg-type]
    trainer = L.Trainer(max_epochs=epochs, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(transformer, train_dataloader, val_dataloader)
    val_loss = float(trainer.callback_metrics["val_loss"])
    (translation,) = trainer.predict(transformer, DataLoader([SENTENCE], batch_size=None))  # type: ignore[misc]
    return {"model": transformer, "trainer": trainer, "val_loss": val_loss, "translation": translation}
