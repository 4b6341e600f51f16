"""A word-level LSTM language model trained with truncated backpropagation, as Lightning's demo
defines it (`lightning.pytorch.demos.lstm`): the same layers and initialisation, the same
sampler that keeps each batch row reading its own stretch of the text, the same loss, logging
and optimizer, so a project written with them trains to Lightning's weights.

Example:
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = SimpleLSTM(vocab_size=20, ninp=8, nhid=8, nlayers=1)
    >>> out, hidden = model(torch.randint(20, (2, 5)), model.init_hidden(2))
    >>> out.shape, hidden[0].shape
    (torch.Size([10, 20]), torch.Size([1, 2, 8]))
    >>> list(SequenceSampler(range(10), batch_size=3))
    [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler

from trainer.demos.transformer import WikiText2
from trainer.module import Module

__all__ = ["SimpleLSTM", "SequenceSampler", "LightningLSTM"]


class SimpleLSTM(nn.Module):
    """Embedding, a stacked `batch_first` LSTM and a linear decoder, with dropout after the
    embedding and after the LSTM; `forward(input, hidden)` returns the log-probabilities
    `(batch * length, vocab_size)` and the new hidden state."""

    def __init__(self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4,
                 dropout: float = 0.2) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        # made in this order so a seeded model draws Lightning's initial weights
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.nlayers = nlayers
        self.nhid = nhid
        self.init_weights()

    def init_weights(self) -> None:
        """Embedding and decoder weights uniform in [-0.1, 0.1], decoder bias zero."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.vocab_size)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """Zero hidden and cell states for `batch_size` rows, on the model's device and dtype."""
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, batch_size, self.nhid),
                weight.new_zeros(self.nlayers, batch_size, self.nhid))


class SequenceSampler(Sampler[list[int]]):
    """Batches of indices in which row `r` walks its own contiguous stretch of the dataset:
    batch `i` is `[i, i + c, i + 2c, ...]` with `c = len(dataset) // batch_size` (the last
    `len(dataset) % batch_size` items are never read), so a hidden state carried from batch to
    batch follows the text. Pass it as a DataLoader's `batch_sampler`."""

    def __init__(self, dataset: Sized, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.chunk_size = len(self.dataset) // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        total = len(self.dataset)
        end = total - total % self.batch_size
        for i in range(self.chunk_size):
            yield list(range(i, end, self.chunk_size))

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(Module):
    """`SimpleLSTM(vocab_size)` trained on WikiText2 (from `./data`, 20 rows a batch through
    `SequenceSampler`), the hidden state carried (detached) from step to step and dropped at each
    epoch's end; logs `train_loss` (progress bar); SGD(lr=20)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[Tensor, Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        self.hidden = None

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        input, target = batch
        if self.hidden is None:
            self.hidden = self.model.init_hidden(input.size(0))
        hidden = (self.hidden[0].detach(), self.hidden[1].detach())
        output, self.hidden = self.model(input, hidden)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=20.0)
