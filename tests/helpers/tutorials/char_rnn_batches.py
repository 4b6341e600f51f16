"""intermediate_source/char_rnn_classification_tutorial.py as it is now: `nn.RNN`, minibatches
made by hand each epoch, a summed loss, clipping, a confusion matrix on a held-out split.

The data are `(label_tensor, text_tensor, label, text)` items split 85/15 by `random_split`
with a seeded generator. Each epoch `train` calls `rnn.zero_grad()`, shuffles the indexes with
Python's `random.shuffle`, cuts them with `np.array_split` into `len // n_batch_size` batches
of unequal sizes ("we cannot use dataloaders because each of our names is a different
length"), sums one loss per name, steps SGD after `clip_grad_norm_(rnn.parameters(), 3)`, and
records the epoch's mean of per-name batch losses. `evaluate` fills a confusion matrix in eval
mode under `no_grad`. The port: the same batches from an iterable that makes them anew on each
pass (`HandMadeBatches`), `gradient_clip_val=3`, and `trainer.test` on the test split.
Sizes: the names of `char_rnn`, hidden 16 instead of 128, batches of 8, 3 epochs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, random_split

from tests.helpers.tutorials.char_rnn import category_lines, lineToTensor, n_letters
from trainer import Module

N_HIDDEN, N_EPOCH, N_BATCH_SIZE, LEARNING_RATE = 16, 3, 8, 0.15


class NamesDataset(Dataset):
    def __init__(self) -> None:
        self.data, self.data_tensors, self.labels, self.labels_tensors = [], [], [], []  # type: ignore[var-annotated]
        for label, names in category_lines.items():
            for name in names:
                self.data.append(name)
                self.data_tensors.append(lineToTensor(name))
                self.labels.append(label)
        self.labels_uniq = list(set(self.labels))
        self.labels_uniq.sort()
        for label in self.labels:
            self.labels_tensors.append(torch.tensor([self.labels_uniq.index(label)], dtype=torch.long))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor, str, str]:
        return self.labels_tensors[idx], self.data_tensors[idx], self.labels[idx], self.data[idx]


alldata = NamesDataset()
classes = alldata.labels_uniq


def splits() -> tuple[Any, Any]:
    train_set, test_set = random_split(alldata, [.85, .15], generator=torch.Generator().manual_seed(2024))
    return train_set, test_set


def label_from_output(output: torch.Tensor, output_labels: list[str]) -> tuple[str, int]:
    top_n, top_i = output.topk(1)
    label_i = int(top_i[0].item())
    return output_labels[label_i], label_i


class CharRNN(Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int) -> None:
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)
        self.criterion = nn.NLLLoss()
        self.all_losses: list[float] = []

    def forward(self, line_tensor: torch.Tensor) -> torch.Tensor:
        rnn_out, hidden = self.rnn(line_tensor)
        output = self.h2o(hidden[0])
        return self.softmax(output)

    def batch_loss(self, batch: list[tuple[torch.Tensor, torch.Tensor, str, str]]) -> torch.Tensor:
        batch_loss: Any = 0
        for (label_tensor, text_tensor, label, text) in batch:
            output = self.forward(text_tensor)
            batch_loss += self.criterion(output, label_tensor)
        return batch_loss

    # the port
    def on_train_epoch_start(self) -> None:
        self.current_loss = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        batch_loss = self.batch_loss(batch)
        self.current_loss += batch_loss.item() / len(batch)
        return batch_loss

    def on_train_epoch_end(self) -> None:
        self.all_losses.append(self.current_loss / len(self.trainer.train_dataloader))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["current_loss"] = self.current_loss  # the epoch's running sum, for a resume inside it

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.current_loss = checkpoint["current_loss"]

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=LEARNING_RATE)

    def on_test_start(self) -> None:
        self.confusion = torch.zeros(len(classes), len(classes))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        label_tensor, text_tensor, label, text = batch
        self.count(label, self(text_tensor))

    def count(self, label: str, output: torch.Tensor) -> None:
        guess, guess_i = label_from_output(output, classes)
        self.confusion[classes.index(label)][guess_i] += 1


class HandMadeBatches:
    """The tutorial's minibatches: on each pass the indexes shuffled by `random.shuffle`
    and cut by `np.array_split`, each batch a list of items."""

    def __init__(self, training_data: Any, n_batch_size: int = N_BATCH_SIZE, numpy: bool = False) -> None:
        self.training_data, self.n_batch_size, self.numpy = training_data, n_batch_size, numpy

    def __len__(self) -> int:
        return len(self.training_data) // self.n_batch_size

    def __iter__(self) -> Iterator[list[Any]]:
        batches = list(range(len(self.training_data)))
        if self.numpy:  # the same with NumPy's global generator, as bucketing samplers often do
            np.random.shuffle(batches)
        else:
            random.shuffle(batches)
        for batch in np.array_split(batches, len(batches) // self.n_batch_size):
            yield [self.training_data[i] for i in batch]


def original() -> CharRNN:
    random.seed(0)
    torch.manual_seed(0)
    train_set, test_set = splits()
    rnn = CharRNN(n_letters, N_HIDDEN, len(classes))
    current_loss = 0.0
    rnn.train()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=LEARNING_RATE)
    for _ in range(1, N_EPOCH + 1):
        rnn.zero_grad()
        batches = list(range(len(train_set)))
        random.shuffle(batches)
        batches = np.array_split(batches, len(batches) // N_BATCH_SIZE)  # type: ignore[assignment]
        for idx, batch in enumerate(batches):
            batch_loss = rnn.batch_loss([train_set[i] for i in batch])  # type: ignore[attr-defined]
            batch_loss.backward()
            nn.utils.clip_grad_norm_(rnn.parameters(), 3)
            optimizer.step()
            optimizer.zero_grad()
            current_loss += batch_loss.item() / len(batch)  # type: ignore[arg-type, operator]
        rnn.all_losses.append(current_loss / len(batches))
        current_loss = 0
    rnn.on_test_start()
    rnn.eval()
    with torch.no_grad():
        for i in range(len(test_set)):
            (label_tensor, text_tensor, label, text) = test_set[i]
            rnn.count(label, rnn(text_tensor))
    return rnn
