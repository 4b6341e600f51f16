"""A word-level language model the way PyTorch's `word_language_model` example trains it, moved
into a LightningModule: the corpus is batchified into columns and cut into BPTT chunks, the
LSTM's hidden state is carried from chunk to chunk (detached: truncated backpropagation) in
buffers registered with `persistent=True`, so checkpoints hold it, and it is zeroed in
`on_train_epoch_start`. Gradient clipping, a plateau-free StepLR, validation perplexity and
`ModelCheckpoint(every_n_train_steps=...)` as a preemptible job uses them.

`main(..., stop_at=n)` trains n optimizer steps (inside the second epoch), then a new process's
worth of objects (model, Trainer) continues from the step checkpoint with `ckpt_path`: the
hidden state, the weights and the random streams must come back as they were, and the epoch's
start hook must not wipe the restored state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import trainer as L
from callbacks import ModelCheckpoint

VOCAB, COLUMNS, BPTT = 13, 4, 6


class Corpus(Dataset):
    """Consecutive (input, target) chunks of a token stream batchified into COLUMNS columns."""

    def __init__(self, tokens: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        stream = torch.randint(0, VOCAB, (tokens,), generator=g)
        self.length = (tokens - 1) // COLUMNS
        self.stream = stream[: self.length * COLUMNS + 1]

    def __len__(self) -> int:
        return self.length // BPTT

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.arange(COLUMNS) * self.length
        positions = rows[:, None] + index * BPTT + torch.arange(BPTT)[None, :]
        return self.stream[positions], self.stream[positions + 1]


class WordLM(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 1.0, dropout: float = 0.2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = torch.nn.Embedding(VOCAB, hidden)
        self.rnn = torch.nn.LSTM(hidden, hidden, batch_first=True)
        self.drop = torch.nn.Dropout(dropout)
        self.decoder = torch.nn.Linear(hidden, VOCAB)
        self.register_buffer("h", torch.zeros(1, COLUMNS, hidden), persistent=True)
        self.register_buffer("c", torch.zeros(1, COLUMNS, hidden), persistent=True)

    def on_train_epoch_start(self) -> None:
        self.h = torch.zeros_like(self.h)  # every epoch reads the corpus from its start
        self.c = torch.zeros_like(self.c)

    def forward(self, tokens: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> Any:
        out, state = self.rnn(self.drop(self.encoder(tokens)), state)
        return self.decoder(self.drop(out)), state

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits, (h, c) = self(x, (self.h, self.c))
        self.h, self.c = h.detach(), c.detach()  # repackage: the next chunk starts here, without the graph
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        zeros = torch.zeros_like(self.h)
        logits, _ = self(x, (zeros, zeros.clone()))
        self.log("val_ppl", torch.exp(F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


def loaders() -> tuple[DataLoader, DataLoader]:
    return (DataLoader(Corpus(4 * 6 * 10 + 1, seed=0), batch_size=None),  # 10 chunks an epoch
            DataLoader(Corpus(4 * 6 * 3 + 1, seed=1), batch_size=None))


def make_trainer(root_dir: Path, precision: str, max_steps: int = -1, max_epochs: int = 3) -> Any:
    checkpoint = ModelCheckpoint(dirpath=root_dir / "ckpts", filename="{step}", every_n_train_steps=7, save_top_k=-1)
    return L.Trainer(max_epochs=max_epochs, max_steps=max_steps, gradient_clip_val=0.25, precision=precision,
                     default_root_dir=root_dir, logger=False, callbacks=[checkpoint], enable_progress_bar=False,
                     enable_model_summary=False)


def main(root_dir: str | Path, precision: str = "32-true", stop_at: int | None = None) -> dict[str, Any]:
    root_dir = Path(root_dir)
    L.seed_everything(8)
    model = WordLM()
    if stop_at is None:
        trainer = make_trainer(root_dir, precision)
        trainer.fit(model, *loaders())
        return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics)}
    first = make_trainer(root_dir, precision, max_steps=stop_at)
    first.fit(model, *loaders())
    cut = root_dir / "ckpts" / f"step={stop_at}.ckpt"
    saved_state = model.h.clone()
    L.seed_everything(123)  # another process: other random streams until the checkpoint's come back
    model = WordLM()
    trainer = make_trainer(root_dir, precision)
    trainer.fit(model, *loaders(), ckpt_path=str(cut))
    return {"model": model, "trainer": trainer, "val": dict(trainer.callback_metrics), "cut": cut.name,
            "saved_state": saved_state}
