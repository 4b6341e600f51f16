"""A small word-level transformer language model and its text, as Lightning's demo defines them
(`lightning.pytorch.demos.transformer`): the same layers made in the same order, the same
masks, positional encoding, loss and optimizer, and the same tokens read from the same file,
so a project written with them trains to Lightning's weights.

`WikiText2` reads `<data_dir>/wikitext-2.txt` (the training split of PyTorch's
`word_language_model` example); with `download=True` a missing file is fetched first. Where the
machine is offline, put the file there yourself: any text file works, one sentence a line.

Example:
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = Transformer(vocab_size=20, ninp=8, nhead=2, nhid=16, nlayers=1)
    >>> tokens = torch.randint(20, (2, 5))
    >>> model(tokens, tokens).shape  # log-probabilities, one row per token
    torch.Size([10, 20])
"""

from __future__ import annotations

import math
import os
import tempfile
import urllib.request
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from trainer.module import Module

__all__ = ["Transformer", "PositionalEncoding", "WikiText2", "Dictionary", "tokenize", "LightningTransformer"]

# As Lightning's demo does when imported: attention layers answer `reset_parameters()` (torch
# names it `_reset_parameters`), so code that re-initialises every module that has one (meta-device
# initialisation, a fresh start of a trained model) resets them too, under both packages alike.
if not hasattr(nn.MultiheadAttention, "reset_parameters"):
    nn.MultiheadAttention.reset_parameters = nn.MultiheadAttention._reset_parameters  # type: ignore[attr-defined]

#: Where `WikiText2(download=True)` fetches its file from (PyTorch's example data).
WIKITEXT2_URL = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"


class Transformer(nn.Module):
    """`nn.Transformer` (encoder and decoder, `batch_first`) between a shared embedding and a
    linear decoder; `forward(inputs, target)` returns log-probabilities of shape
    `(batch * length, vocab_size)`. The default vocabulary is WikiText2's."""

    def __init__(self, vocab_size: int = 33278, ninp: int = 200, nhead: int = 2, nhid: int = 200, nlayers: int = 2,
                 dropout: float = 0.2) -> None:
        super().__init__()
        # made in this order so a seeded model draws Lightning's initial weights
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(d_model=ninp, nhead=nhead, num_encoder_layers=nlayers,
                                          num_decoder_layers=nlayers, dim_feedforward=nhid, dropout=dropout,
                                          batch_first=True)
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size
        self.src_mask: Tensor | None = None

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """A `size x size` float mask: `-inf` above the diagonal (future tokens), 0 elsewhere."""
        upper = torch.triu(torch.ones(size, size), diagonal=1)
        return upper.float().masked_fill(upper == 1, float("-inf")).masked_fill(upper == 0, 0.0)

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        length = inputs.shape[1]
        if self.src_mask is None or self.src_mask.size(0) != length:
            self.src_mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        if mask is None:
            mask = self.generate_square_subsequent_mask(length).to(inputs.device)
        scale = math.sqrt(self.ninp)
        source = self.pos_encoder(self.embedding(inputs) * scale)
        shifted = self.pos_encoder(self.embedding(target) * scale)
        logits = self.decoder(self.transformer(source, shifted, tgt_mask=mask))
        return F.log_softmax(logits, dim=-1).view(-1, self.vocab_size)


class PositionalEncoding(nn.Module):
    """Adds a sinusoidal position code to its input, then dropout. As in Lightning's demo, the
    code added is the one of position `x.size(1)` (the sequence length), the same for every
    token; the table is built on first use on the input's device and is not a buffer (not in
    the state dict)."""

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        self.pe: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.pe is None:
            self.pe = self._init_pos_encoding(device=x.device)
        return self.dropout(x + self.pe[:, x.size(1)])

    def _init_pos_encoding(self, device: torch.device) -> Tensor:
        table = torch.zeros(self.max_len, self.dim, device=device)
        position = torch.arange(0, self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        table[:, 0::2] = torch.sin(position * frequency)
        table[:, 1::2] = torch.cos(position * frequency)
        return table.unsqueeze(0)


class WikiText2(Dataset):
    """The tokens of `<data_dir>/wikitext-2.txt` cut into blocks: item `i` is
    `(tokens[i*b : i*b+b], tokens[i*b+1 : i*b+b+1])` for `b = block_size` (inputs and the next
    tokens). Each line's words (split on whitespace) end with `<eos>`; words are numbered in
    order of first appearance (`self.dictionary`)."""

    def __init__(self, data_dir: Path | str = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1:end + 1]

    @staticmethod
    def download(destination: Path) -> None:
        """Fetch the text to `destination` unless it is there already; written whole or not at
        all (a failed fetch leaves no empty file behind)."""
        destination = Path(destination)
        if destination.exists():
            return
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(WIKITEXT2_URL, timeout=60) as response:  # noqa: S310 (a fixed https URL)
                text = response.read()
        except OSError as error:
            raise FileNotFoundError(
                f"WikiText2 found no text at {destination} and could not download it ({error}). Expected the "
                f"training split of WikiText-2 there (one sentence a line). Fix: copy the file from {WIKITEXT2_URL} "
                "(or any text file) to that path, or pass `data_dir=` a folder holding `wikitext-2.txt`."
            ) from error
        handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=".wikitext-2.")
        with os.fdopen(handle, "wb") as file:
            file.write(text)
        os.replace(temporary, destination)


class Dictionary:
    """Words numbered in order of first appearance: `word2idx` and `idx2word`."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        """The word's number, adding the word first when it is new."""
        if word not in self.word2idx:
            self.word2idx[word] = len(self.idx2word)
            self.idx2word.append(word)
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path | str) -> tuple[Tensor, Dictionary]:
    """The file's words as one int64 tensor of their numbers (each line's words followed by
    `<eos>`) and the dictionary that numbers them.

    Raises:
        FileNotFoundError: there is no file at `path`.
        ValueError: the file holds no lines.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No text file at {path}. Expected a UTF-8 text file, one sentence a line. Fix: put the file there "
            "(for WikiText2, `wikitext-2.txt` in its `data_dir`), or let `WikiText2(download=True)` fetch it."
        )
    dictionary = Dictionary()
    ids: list[int] = []
    with open(path, encoding="utf8") as file:
        for line in file:
            ids.extend(dictionary.add_word(word) for word in line.split() + ["<eos>"])
    if not ids:
        raise ValueError(f"The text file {path} is empty. Expected at least one line of text to tokenize.")
    return torch.tensor(ids, dtype=torch.int64), dictionary


class LightningTransformer(Module):
    """`Transformer(vocab_size)` trained on WikiText2 (from `./data`, one block a batch) with
    the negative log-likelihood of the next tokens and SGD(lr=0.1)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(WikiText2())
