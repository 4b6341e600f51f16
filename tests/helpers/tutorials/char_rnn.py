"""intermediate_source/char_rnn_classification_tutorial.py and char_rnn_generation_tutorial.py
at toy size: one name per step, drawn with Python's `random`, fed letter by letter.

Both tutorials draw a random training example per iteration (`randomTrainingExample()`:
`random.randint` picks a language, then a name), run the name through a hand-made RNN cell
one letter at a time, and update the weights by hand with `p.data.add_(p.grad.data,
alpha=-learning_rate)` after `rnn.zero_grad()`. The classifier's loss is the last letter's;
the generator (with dropout) sums one loss per letter and reports it per letter. They print
every `PRINT_EVERY` iterations and average the losses every `PLOT_EVERY`. After training,
the classifier draws `N_CONFUSION` more examples for a confusion matrix (no `no_grad`, as
written), and the generator samples names (under `no_grad`, the model still in training mode,
so its dropout draws).

The port keeps the draws in its training data: an endless iterable that calls
`randomTrainingExample()` each time it is read (one example per step, as is), and
`max_steps=n_iters`; the update by hand is `SGD(lr)` (see
docs/manual_optimization.md). Sizes: 6 languages of 8 made-up names, hidden 16 instead of 128.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from trainer import Module

all_letters = string.ascii_letters + " .,;'"
n_letters = len(all_letters)
N_HIDDEN, N_ITERS, PRINT_EVERY, PLOT_EVERY, N_CONFUSION = 16, 40, 10, 5, 20


def names() -> dict[str, list[str]]:
    """`category_lines`: made-up names per language, the same every call."""
    rng = random.Random(0)
    return {lang: ["".join(rng.choice(string.ascii_lowercase[i:i + 9]) for _ in range(rng.randint(2, 7))).title()
                   for _ in range(8)]
            for i, lang in enumerate(["Arabic", "Czech", "Dutch", "Greek", "Irish", "Korean"])}


category_lines = names()
all_categories = list(category_lines)
n_categories = len(all_categories)


def letterToIndex(letter: str) -> int:
    return all_letters.find(letter)


def lineToTensor(line: str) -> torch.Tensor:
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


def randomChoice(seq: list[str]) -> str:
    return seq[random.randint(0, len(seq) - 1)]


def randomTrainingExample() -> tuple[str, str, torch.Tensor, torch.Tensor]:
    category = randomChoice(all_categories)
    line = randomChoice(category_lines[category])
    category_tensor = torch.tensor([all_categories.index(category)], dtype=torch.long)
    return category, line, category_tensor, lineToTensor(line)


def categoryFromOutput(output: torch.Tensor) -> tuple[str, int]:
    top_n, top_i = output.topk(1)
    category_i = top_i[0].item()
    return all_categories[category_i], category_i  # type: ignore[index, return-value]


class RandomExamples:
    """The port's training data: an endless iterable calling the tutorial's own draw on each
    read. Not a `DataLoader`: iterating one draws its base seed from torch's generator, which
    the tutorial's loop never does (the generator's dropout masks would move)."""

    def __init__(self, draw: Callable[[], Any] = randomTrainingExample) -> None:
        self.draw = draw

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.draw()


class RandomExampleDataset(RandomExamples, IterableDataset):
    pass


def random_examples(draw: Callable[[], Any] = randomTrainingExample, loader: bool = False,
                    generator: torch.Generator | None = None) -> Any:
    """`loader`: the same in a `DataLoader(batch_size=None)`, drawing a base seed when iterated
    (from `generator` when given, else from torch's)."""
    if loader:
        return DataLoader(RandomExampleDataset(draw), batch_size=None, generator=generator)
    return RandomExamples(draw)


class RNN(Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(input_size + hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)
        self.criterion = nn.NLLLoss()
        self.learning_rate = 0.005
        self.current_loss, self.all_losses, self.printed = 0.0, [], []  # type: ignore[var-annotated]

    def forward(self, input: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        combined = torch.cat((input, hidden), 1)
        hidden = self.i2h(combined)
        output = self.i2o(combined)
        output = self.softmax(output)
        return output, hidden

    def initHidden(self) -> torch.Tensor:
        return torch.zeros(1, self.hidden_size)

    def loss(self, category_tensor: torch.Tensor, line_tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`train()` up to its backward."""
        hidden = self.initHidden()
        for i in range(line_tensor.size()[0]):
            output, hidden = self(line_tensor[i], hidden)
        return output, self.criterion(output, category_tensor)

    def record(self, iter: int, category: str, line: str, output: torch.Tensor, loss: float) -> None:
        """The tutorial's bookkeeping after each `train()` (without the time)."""
        self.current_loss += loss
        if iter % PRINT_EVERY == 0:
            guess, guess_i = categoryFromOutput(output)
            correct = "✓" if guess == category else "✗ (%s)" % category
            self.printed.append("%d %d%% %.4f %s / %s %s" % (iter, iter / N_ITERS * 100, loss, line, guess, correct))
        if iter % PLOT_EVERY == 0:
            self.all_losses.append(self.current_loss / PLOT_EVERY)
            self.current_loss = 0

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        category, line, category_tensor, line_tensor = batch
        output, loss = self.loss(category_tensor, line_tensor)
        self.record(batch_idx + 1, category, line, output, loss.item())
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.learning_rate)

    def on_test_start(self) -> None:
        self.confusion = torch.zeros(n_categories, n_categories)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        category, line, category_tensor, line_tensor = batch
        output, _ = self.loss(category_tensor, line_tensor)
        self.count(category, output)

    def count(self, category: str, output: torch.Tensor) -> None:
        guess, guess_i = categoryFromOutput(output)
        self.confusion[all_categories.index(category)][guess_i] += 1


def original_classification() -> RNN:
    random.seed(0)
    torch.manual_seed(0)
    rnn = RNN(n_letters, N_HIDDEN, n_categories)

    def train(category_tensor: torch.Tensor, line_tensor: torch.Tensor) -> tuple[torch.Tensor, float]:
        hidden = rnn.initHidden()
        rnn.zero_grad()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        loss = rnn.criterion(output, category_tensor)
        loss.backward()
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-rnn.learning_rate)  # type: ignore[union-attr]
        return output, loss.item()

    for iter in range(1, N_ITERS + 1):
        category, line, category_tensor, line_tensor = randomTrainingExample()
        output, loss = train(category_tensor, line_tensor)
        rnn.record(iter, category, line, output, loss)

    def evaluate(line_tensor: torch.Tensor) -> torch.Tensor:
        hidden = rnn.initHidden()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        return output

    rnn.on_test_start()
    for _ in range(N_CONFUSION):
        category, line, category_tensor, line_tensor = randomTrainingExample()
        rnn.count(category, evaluate(line_tensor))
    return rnn


# char_rnn_generation_tutorial.py: letters plus EOS, the language as an extra input.
n_gen_letters = n_letters + 1  # plus EOS marker
MAX_LENGTH = 8


def inputTensor(line: str) -> torch.Tensor:
    tensor = torch.zeros(len(line), 1, n_gen_letters)
    for li in range(len(line)):
        tensor[li][0][all_letters.find(line[li])] = 1
    return tensor


def categoryTensor(category: str) -> torch.Tensor:
    tensor = torch.zeros(1, n_categories)
    tensor[0][all_categories.index(category)] = 1
    return tensor


def targetTensor(line: str) -> torch.Tensor:
    letter_indexes = [all_letters.find(line[li]) for li in range(1, len(line))]
    letter_indexes.append(n_gen_letters - 1)  # EOS
    return torch.LongTensor(letter_indexes)


def randomTrainingPair() -> tuple[str, str]:
    category = randomChoice(all_categories)
    return category, randomChoice(category_lines[category])


def randomGenerationExample() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    category, line = randomTrainingPair()
    return categoryTensor(category), inputTensor(line), targetTensor(line)


class GenRNN(Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(n_categories + input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(n_categories + input_size + hidden_size, output_size)
        self.o2o = nn.Linear(hidden_size + output_size, output_size)
        self.dropout = nn.Dropout(0.1)
        self.softmax = nn.LogSoftmax(dim=1)
        self.criterion = nn.NLLLoss()
        self.learning_rate = 0.0005
        self.total_loss, self.all_losses, self.printed = 0.0, [], []  # type: ignore[var-annotated]

    def forward(self, category: torch.Tensor, input: torch.Tensor,
                hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        input_combined = torch.cat((category, input, hidden), 1)
        hidden = self.i2h(input_combined)
        output = self.i2o(input_combined)
        output_combined = torch.cat((hidden, output), 1)
        output = self.o2o(output_combined)
        output = self.dropout(output)
        output = self.softmax(output)
        return output, hidden

    def initHidden(self) -> torch.Tensor:
        return torch.zeros(1, self.hidden_size)

    def loss(self, category_tensor: torch.Tensor, input_line_tensor: torch.Tensor,
             target_line_tensor: torch.Tensor) -> torch.Tensor:
        """`train()` up to its backward: a sum of one loss per letter."""
        target_line_tensor.unsqueeze_(-1)
        hidden = self.initHidden()
        loss: Any = 0
        for i in range(input_line_tensor.size(0)):
            output, hidden = self(category_tensor, input_line_tensor[i], hidden)
            loss += self.criterion(output, target_line_tensor[i])
        return loss

    def record(self, iter: int, loss: float) -> None:
        self.total_loss += loss
        if iter % PRINT_EVERY == 0:
            self.printed.append("%d %d%% %.4f" % (iter, iter / N_ITERS * 100, loss))
        if iter % PLOT_EVERY == 0:
            self.all_losses.append(self.total_loss / PLOT_EVERY)
            self.total_loss = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(*batch)
        self.record(batch_idx + 1, loss.item() / batch[1].size(0))
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.learning_rate)

    def sample(self, category: str, start_letter: str = "A") -> str:
        """The tutorial's `sample`: under `no_grad`, in whatever mode training left the model."""
        with torch.no_grad():
            category_tensor = categoryTensor(category)
            input = inputTensor(start_letter)
            hidden = self.initHidden()
            output_name = start_letter
            for _ in range(MAX_LENGTH):
                output, hidden = self(category_tensor, input[0], hidden)
                topv, topi = output.topk(1)
                topi = topi[0][0]
                if topi == n_gen_letters - 1:
                    break
                letter = all_letters[topi]
                output_name += letter
                input = inputTensor(letter)
            return output_name

    def samples(self, category: str, start_letters: str = "ABC") -> list[str]:
        return [self.sample(category, start_letter) for start_letter in start_letters]


def original_generation() -> GenRNN:
    random.seed(0)
    torch.manual_seed(0)
    rnn = GenRNN(n_gen_letters, N_HIDDEN, n_gen_letters)

    def train(category_tensor: torch.Tensor, input_line_tensor: torch.Tensor,
              target_line_tensor: torch.Tensor) -> tuple[None, float]:
        target_line_tensor.unsqueeze_(-1)
        hidden = rnn.initHidden()
        rnn.zero_grad()
        loss: Any = 0
        for i in range(input_line_tensor.size(0)):
            output, hidden = rnn(category_tensor, input_line_tensor[i], hidden)
            loss += rnn.criterion(output, target_line_tensor[i])
        loss.backward()
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-rnn.learning_rate)  # type: ignore[union-attr]
        return None, loss.item() / input_line_tensor.size(0)

    for iter in range(1, N_ITERS + 1):
        _, loss = train(*randomGenerationExample())
        rnn.record(iter, loss)
    return rnn
