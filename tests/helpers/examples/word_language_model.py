"""pytorch/examples' word_language_model at toy size: its model and the script's own loop.

The model is a `Module`, so its port (tests/examples/test_word_language_model.py) trains the same
code; the script's loop uses it as a plain `nn.Module`.

The example batchifies a token stream into columns and slices `bptt` rows at a time (no
DataLoader); the hidden state starts at zero each epoch, is carried (detached) from one
slice to the next, and evaluation starts its own. Clipping at 0.25 before each SGD step.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F

from tests.helpers.examples import DTYPES
from trainer import Module


VOCAB, BPTT, COLUMNS = 12, 5, 4


def batchify(tokens: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rows = tokens.numel() // COLUMNS
    data = tokens[: rows * COLUMNS].view(COLUMNS, rows).t().contiguous()
    return [(data[i : i + min(BPTT, rows - 1 - i)], data[i + 1 : i + 1 + min(BPTT, rows - 1 - i)])
            for i in range(0, rows - 1, BPTT)]


def corpus() -> tuple[list[Any], list[Any]]:
    g = torch.Generator().manual_seed(0)
    return batchify(torch.randint(0, VOCAB, (164,), generator=g)), batchify(torch.randint(0, VOCAB, (64,), generator=g))


class RNNModel(Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Embedding(VOCAB, 8)
        self.rnn = torch.nn.RNN(8, 16, nonlinearity="tanh")
        self.drop = torch.nn.Dropout(0.2)
        self.decoder = torch.nn.Linear(16, VOCAB)
        self.hidden: torch.Tensor | None = None
        self.eval_hidden: torch.Tensor | None = None

    def init_hidden(self) -> torch.Tensor:
        return torch.zeros(1, COLUMNS, 16)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(output)).float(), hidden

    def loss(self, batch: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits, hidden = self(x, hidden.detach())
        return F.cross_entropy(logits.view(-1, VOCAB), y.reshape(-1)), hidden

    def on_train_epoch_start(self) -> None:
        self.hidden = self.init_hidden()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        assert self.hidden is not None
        loss, self.hidden = self.loss(batch, self.hidden)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.eval_hidden = self.init_hidden()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        assert self.eval_hidden is not None
        loss, self.eval_hidden = self.loss(batch, self.eval_hidden)
        self.log("val/loss", loss, batch_size=len(batch[0]))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=2.0)


def original_lm(precision: str, epochs: int = 2) -> RNNModel:
    torch.manual_seed(1)
    model = RNNModel()
    train, val = corpus()
    dtype = DTYPES[precision]
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype is not None else contextlib.nullcontext
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "amp")
    optimizer = model.configure_optimizers()

    def evaluate() -> None:
        model.eval()
        hidden = model.init_hidden()
        with torch.no_grad():
            for batch in val:
                with autocast():
                    _, hidden = model.loss(batch, hidden)

    for _ in range(epochs):
        model.train()
        hidden = model.init_hidden()
        for batch in train:
            with autocast():
                loss, hidden = model.loss(batch, hidden)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        evaluate()
    return model
