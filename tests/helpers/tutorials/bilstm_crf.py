"""beginner_source/nlp/advanced_tutorial.py ("Making Dynamic Decisions and the Bi-LSTM CRF"):
the tutorial's model and loop (`original`) and its port to a LightningModule (`main`), written
with this package's imports so that `load_file` runs it under Lightning too.

The tutorial: a bidirectional LSTM gives emission scores, a learned transition matrix the
CRF's; the loss is the negative log-likelihood (the forward algorithm in log space minus the
gold path's score, a one-element tensor), decoding is Viterbi with Python loops over the tags.
Its loop trains one sentence at a time from a list of word lists, `model.zero_grad()` first,
SGD with weight decay; every forward draws a new random LSTM state (`init_hidden` uses
`torch.randn`), and the first sentence's Viterbi score and path are printed before and after
training.

The port: the (words, tags) pairs as the training data, `training_step` returning the
negative log-likelihood; the prediction after training through `trainer.predict`.

Differences from the tutorial: 6 epochs instead of 300 (its model is the tutorial's, sizes
included; `autograd.Variable` and `torch.Tensor(...)` are written as today's tensors).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader

import trainer as L

torch.manual_seed(1)

START_TAG = "<START>"
STOP_TAG = "<STOP>"
EMBEDDING_DIM = 5
HIDDEN_DIM = 4
EPOCHS = 6

training_data = [(
    "the wall street journal reported today that apple corporation made money".split(),
    "B I I I O O O B I O O".split()
), (
    "georgia tech is a university in georgia".split(),
    "B I O O O O B".split()
)]
word_to_ix: dict[str, int] = {}
for sentence, tags in training_data:
    for word in sentence:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}


def to_scalar(var: torch.Tensor) -> Any:
    return var.view(-1).data.tolist()[0]


def argmax(vec: torch.Tensor) -> Any:
    _, idx = torch.max(vec, 1)
    return to_scalar(idx)


def prepare_sequence(seq: list[str], to_ix: dict[str, int]) -> torch.Tensor:
    return torch.LongTensor([to_ix[w] for w in seq])


def log_sum_exp(vec: torch.Tensor) -> torch.Tensor:
    max_score = vec[0, argmax(vec)]
    max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
    return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))


class BiLSTM_CRF(L.LightningModule):
    def __init__(self, vocab_size: int, tag_to_ix: dict[str, int], embedding_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.vocab_size = vocab_size
        self.tag_to_ix = tag_to_ix
        self.tagset_size = len(tag_to_ix)
        self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
        self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
        self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
        self.transitions.data[tag_to_ix[START_TAG], :] = -10000
        self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
        self.hidden = self.init_hidden()

    def init_hidden(self) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(2, 1, self.hidden_dim // 2), torch.randn(2, 1, self.hidden_dim // 2))

    def _forward_alg(self, feats: torch.Tensor) -> torch.Tensor:
        init_alphas = torch.full((1, self.tagset_size), -10000.)
        init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
        forward_var = init_alphas
        for feat in feats:
            alphas_t = []
            for next_tag in range(self.tagset_size):
                emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                trans_score = self.transitions[next_tag].view(1, -1)
                next_tag_var = forward_var + trans_score + emit_score
                alphas_t.append(log_sum_exp(next_tag_var).view(1))
            forward_var = torch.cat(alphas_t).view(1, -1)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        return log_sum_exp(terminal_var)

    def _get_lstm_features(self, sentence: torch.Tensor) -> torch.Tensor:
        self.hidden = self.init_hidden()
        embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
        lstm_out, self.hidden = self.lstm(embeds, self.hidden)
        lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
        return self.hidden2tag(lstm_out)

    def _score_sentence(self, feats: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        score = torch.zeros(1)
        tags = torch.cat([torch.LongTensor([self.tag_to_ix[START_TAG]]), tags])
        for i, feat in enumerate(feats):
            score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
        return score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]

    def _viterbi_decode(self, feats: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        backpointers = []
        init_vvars = torch.full((1, self.tagset_size), -10000.)
        init_vvars[0][self.tag_to_ix[START_TAG]] = 0
        forward_var = init_vvars
        for feat in feats:
            bptrs_t = []
            viterbivars_t = []
            for next_tag in range(self.tagset_size):
                next_tag_var = forward_var + self.transitions[next_tag]
                best_tag_id = argmax(next_tag_var)
                bptrs_t.append(best_tag_id)
                viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
            forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
            backpointers.append(bptrs_t)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        best_tag_id = argmax(terminal_var)
        path_score = terminal_var[0][best_tag_id]
        best_path = [best_tag_id]
        for bptrs_t in reversed(backpointers):
            best_tag_id = bptrs_t[best_tag_id]
            best_path.append(best_tag_id)
        start = best_path.pop()
        assert start == self.tag_to_ix[START_TAG]
        best_path.reverse()
        return path_score, best_path

    def neg_log_likelihood(self, sentence: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        feats = self._get_lstm_features(sentence)
        forward_score = self._forward_alg(feats)
        gold_score = self._score_sentence(feats, tags)
        return forward_score - gold_score

    def forward(self, sentence: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        lstm_feats = self._get_lstm_features(sentence)
        return self._viterbi_decode(lstm_feats)

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        sentence, tags = batch
        sentence_in = prepare_sequence(sentence, word_to_ix)
        targets = torch.LongTensor([tag_to_ix[t] for t in tags])
        return self.neg_log_likelihood(sentence_in, targets)

    def predict_step(self, batch: Any, batch_idx: int) -> tuple[torch.Tensor, list[int]]:
        return self(prepare_sequence(batch, word_to_ix))

    def configure_optimizers(self) -> Any:
        return optim.SGD(self.parameters(), lr=0.01, weight_decay=1e-4)


def new_model() -> BiLSTM_CRF:
    torch.manual_seed(1)
    return BiLSTM_CRF(len(word_to_ix), tag_to_ix, EMBEDDING_DIM, HIDDEN_DIM)


def original(epochs: int = EPOCHS) -> tuple[BiLSTM_CRF, list[Any]]:
    model = new_model()
    optimizer = optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
    printed = []
    with torch.no_grad():
        precheck_sent = prepare_sequence(training_data[0][0], word_to_ix)
        printed.append(model(precheck_sent))
    for _epoch in range(epochs):
        for sentence, tags in training_data:
            model.zero_grad()
            sentence_in = prepare_sequence(sentence, word_to_ix)
            targets = torch.LongTensor([tag_to_ix[t] for t in tags])
            neg_log_likelihood = model.neg_log_likelihood(sentence_in, targets)
            neg_log_likelihood.backward()
            optimizer.step()
    with torch.no_grad():
        printed.append(model(prepare_sequence(training_data[0][0], word_to_ix)))
    return model, printed


def main(epochs: int = EPOCHS, data: str = "loader", **options: Any) -> dict[str, Any]:
    """The port; `data="list"` gives `fit` the list of pairs itself (read here as a list of
    batches; Lightning reads a list as several loaders), `"loader"` a `DataLoader` over it with a
    generator of its own (iterating it draws no seed from torch's, which `init_hidden` uses)."""
    model = new_model()
    loader = training_data if data == "list" else DataLoader(training_data, batch_size=None, generator=torch.Generator())
    printed = []
    with torch.no_grad():
        printed.append(model(prepare_sequence(training_data[0][0], word_to_ix)))
    trainer = L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", **options)
    trainer.fit(model, loader)
    precheck = [training_data[0][0]]
    printed.extend(trainer.predict(model, precheck if data == "list" else DataLoader(precheck, batch_size=None, generator=torch.Generator())))  # type: ignore[arg-type]
    return {"model": model, "trainer": trainer, "printed": printed}
