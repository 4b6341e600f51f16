"""beginner_source/nlp/: the LSTM part-of-speech tagger (sequence_models_tutorial.py) and the
N-gram language model (word_embeddings_tutorial.py), both trained one example at a time on
Python lists of words.

Both loops read their examples from a plain list (`training_data`: pairs of word lists;
`ngrams`: pairs of a context word list and a target word), call `model.zero_grad()` first,
turn the words into index tensors inside the loop, and step SGD. The tagger resets its
LSTM state (`model.hidden = model.init_hidden()`) before each sentence and prints the tag
scores of the first sentence before and after training; the N-gram model adds up
`loss.item()` over each epoch. The port gives the lists as they are as training data: each
step receives one example, words and all. Sizes: the tutorials' own (their data is a few
sentences), with fewer epochs and a short made-up text for the N-grams.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer import Module

training_data = [("The dog ate the apple".split(), ["DET", "NN", "V", "DET", "NN"]),
                 ("Everybody read that book".split(), ["NN", "V", "DET", "NN"])]
word_to_ix: dict[str, int] = {}
for sent, _tags in training_data:
    for word in sent:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
tag_to_ix = {"DET": 0, "NN": 1, "V": 2}
EMBEDDING_DIM, HIDDEN_DIM, TAGGER_EPOCHS = 6, 6, 10


def prepare_sequence(seq: list[str], to_ix: dict[str, int]) -> torch.Tensor:
    return torch.tensor([to_ix[w] for w in seq], dtype=torch.long)


class LSTMTagger(Module):
    def __init__(self, embedding_dim: int, hidden_dim: int, vocab_size: int, tagset_size: int) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim)
        self.hidden2tag = nn.Linear(hidden_dim, tagset_size)
        self.hidden = self.init_hidden()
        self.loss_function = nn.NLLLoss()
        self.printed: list[torch.Tensor] = []

    def init_hidden(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, 1, self.hidden_dim), torch.zeros(1, 1, self.hidden_dim)

    def forward(self, sentence: torch.Tensor) -> torch.Tensor:
        embeds = self.word_embeddings(sentence)
        lstm_out, self.hidden = self.lstm(embeds.view(len(sentence), 1, -1), self.hidden)
        tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
        return F.log_softmax(tag_space, dim=1)

    def print_scores(self) -> None:
        self.printed.append(self(prepare_sequence(training_data[0][0], word_to_ix)).detach())

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        sentence, tags = batch
        self.hidden = self.init_hidden()
        sentence_in = prepare_sequence(sentence, word_to_ix)
        targets = prepare_sequence(tags, tag_to_ix)
        return self.loss_function(self(sentence_in), targets)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def original_tagger() -> LSTMTagger:
    torch.manual_seed(1)
    model = LSTMTagger(EMBEDDING_DIM, HIDDEN_DIM, len(word_to_ix), len(tag_to_ix))
    loss_function, optimizer = model.loss_function, model.configure_optimizers()
    model.print_scores()
    for _ in range(TAGGER_EPOCHS):
        for sentence, tags in training_data:
            model.zero_grad()
            model.hidden = model.init_hidden()
            sentence_in = prepare_sequence(sentence, word_to_ix)
            targets = prepare_sequence(tags, tag_to_ix)
            tag_scores = model(sentence_in)
            loss = loss_function(tag_scores, targets)
            loss.backward()
            optimizer.step()
    model.print_scores()
    return model


CONTEXT_SIZE, NGRAM_EMBEDDING_DIM, NGRAM_EPOCHS = 2, 10, 3
test_sentence = """When forty winters shall besiege thy brow and dig deep trenches in thy beauty's field
thy youth's proud livery so gazed on now will be a tattered weed of small worth held""".split()
ngrams = [([test_sentence[i - j - 1] for j in range(CONTEXT_SIZE)], test_sentence[i])
          for i in range(CONTEXT_SIZE, len(test_sentence))]
vocab = set(test_sentence)
ngram_word_to_ix = {word: i for i, word in enumerate(sorted(vocab))}


class NGramLanguageModeler(Module):
    def __init__(self, vocab_size: int, embedding_dim: int, context_size: int) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.linear1 = nn.Linear(context_size * embedding_dim, 128)
        self.linear2 = nn.Linear(128, vocab_size)
        self.loss_function = nn.NLLLoss()
        self.losses: list[float] = []

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        embeds = self.embeddings(inputs).view((1, -1))
        out = F.relu(self.linear1(embeds))
        out = self.linear2(out)
        return F.log_softmax(out, dim=1)

    def loss(self, context: list[str], target: str) -> torch.Tensor:
        context_idxs = torch.tensor([ngram_word_to_ix[w] for w in context], dtype=torch.long)
        log_probs = self(context_idxs)
        return self.loss_function(log_probs, torch.tensor([ngram_word_to_ix[target]], dtype=torch.long))

    def on_train_epoch_start(self) -> None:
        self.total_loss = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(*batch)
        self.total_loss += loss.item()
        return loss

    def on_train_epoch_end(self) -> None:
        self.losses.append(self.total_loss)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.001)


def original_ngram() -> NGramLanguageModeler:
    torch.manual_seed(1)
    model = NGramLanguageModeler(len(vocab), NGRAM_EMBEDDING_DIM, CONTEXT_SIZE)
    optimizer = model.configure_optimizers()
    for _ in range(NGRAM_EPOCHS):
        total_loss = 0.0
        for context, target in ngrams:
            model.zero_grad()
            loss = model.loss(context, target)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        model.losses.append(total_loss)
    return model
