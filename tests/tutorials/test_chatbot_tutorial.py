"""beginner_source/chatbot_tutorial.py (seq2seq chatbot with Luong attention), ported to a `Module`.

The tutorial: a bidirectional GRU encoder over packed padded batches, a Luong-attention GRU
decoder fed one step at a time, one `nn.Embedding` shared by both; `maskNLLLoss` over the
padded targets; teacher forcing decided per batch by `random.random()`; two Adam optimizers
(the decoder's at `decoder_learning_ratio` times the rate; the shared embedding is in both);
per iteration `zero_grad` on both, backward, `clip_grad_norm_` on the encoder's and then the
decoder's parameters, both steps. `trainIters` draws every training batch first
(`random.choice(pairs)`, sorted by length) and prints the average loss every `print_every`
iterations. Evaluation: both networks in eval mode, `GreedySearchDecoder` on a sentence.

The port, as a Lightning user writes it: manual optimization with the two optimizers from
`configure_optimizers`, `self.clip_gradients(optimizer, clip, "norm")` for each network's
clipping (it clips that optimizer's parameters, as the tutorial's `clip_grad_norm_` on each
network's does), the list of drawn batches as its training data, and the greedy decoding in
`predict_step` under `Trainer.predict`. Weights, printed lines and decoded words are the
tutorial's (`torch.equal`, `==`).

Differences from the tutorial, for speed and with no download: the Cornell movie-dialogs corpus
is replaced by 16 pairs of sentences over a ten-word vocabulary; hidden 16 instead of 500,
batch 4 instead of 64, 12 iterations instead of 4000; `teacher_forcing_ratio` 0.5 instead of
1.0, so that both branches run (the draw happens either way).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn, optim

from tests.examples.conftest import one_thread  # noqa: F401  (a step per op: one intra-op thread)
from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from trainer import Module, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")
PAD_token, SOS_token, EOS_token = 0, 1, 2
MAX_LENGTH = 6
hidden_size, encoder_n_layers, decoder_n_layers, dropout, batch_size = 16, 2, 2, 0.1, 4
clip, teacher_forcing_ratio, learning_rate, decoder_learning_ratio = 50.0, 0.5, 0.0001, 5.0
n_iteration, print_every = 12, 3


class Voc:
    def __init__(self) -> None:
        self.index2word = {PAD_token: "PAD", SOS_token: "SOS", EOS_token: "EOS"}
        self.word2index: dict[str, int] = {}
        self.num_words = 3
        for word in "hi how are you fine thanks what is up nothing".split():
            self.word2index[word], self.index2word[self.num_words] = self.num_words, word
            self.num_words += 1


voc = Voc()


def make_pairs() -> list[list[str]]:
    rng, words = random.Random(0), list(voc.word2index)
    return [[" ".join(rng.choice(words) for _ in range(rng.randint(1, MAX_LENGTH - 1))) for _ in range(2)]
            for _ in range(16)]


pairs = make_pairs()


def indexesFromSentence(voc: Voc, sentence: str) -> list[int]:
    return [voc.word2index[word] for word in sentence.split(' ')] + [EOS_token]


def zeroPadding(l: list[list[int]], fillvalue: int = PAD_token) -> list[Any]:
    return list(itertools.zip_longest(*l, fillvalue=fillvalue))


def binaryMatrix(l: list[Any]) -> list[list[int]]:
    return [[0 if token == PAD_token else 1 for token in seq] for seq in l]


def inputVar(l: list[str], voc: Voc) -> tuple[torch.Tensor, torch.Tensor]:
    indexes_batch = [indexesFromSentence(voc, sentence) for sentence in l]
    lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
    return torch.LongTensor(zeroPadding(indexes_batch)), lengths


def outputVar(l: list[str], voc: Voc) -> tuple[torch.Tensor, torch.Tensor, int]:
    indexes_batch = [indexesFromSentence(voc, sentence) for sentence in l]
    max_target_len = max([len(indexes) for indexes in indexes_batch])
    padList = zeroPadding(indexes_batch)
    mask = torch.BoolTensor(binaryMatrix(padList))
    return torch.LongTensor(padList), mask, max_target_len


def batch2TrainData(voc: Voc, pair_batch: list[list[str]]) -> tuple[Any, ...]:
    pair_batch.sort(key=lambda x: len(x[0].split(" ")), reverse=True)
    input_batch, output_batch = [], []
    for pair in pair_batch:
        input_batch.append(pair[0])
        output_batch.append(pair[1])
    inp, lengths = inputVar(input_batch, voc)
    output, mask, max_target_len = outputVar(output_batch, voc)
    return inp, lengths, output, mask, max_target_len


class EncoderRNN(nn.Module):
    def __init__(self, hidden_size: int, embedding: nn.Embedding, n_layers: int = 1, dropout: float = 0) -> None:
        super().__init__()
        self.n_layers, self.hidden_size, self.embedding = n_layers, hidden_size, embedding
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout),
                          bidirectional=True)

    def forward(self, input_seq: torch.Tensor, input_lengths: torch.Tensor, hidden: Any = None) -> Any:
        embedded = self.embedding(input_seq)
        packed = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths)
        outputs, hidden = self.gru(packed, hidden)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs)
        outputs = outputs[:, :, :self.hidden_size] + outputs[:, :, self.hidden_size:]
        return outputs, hidden


class Attn(nn.Module):  # the 'dot' method
    def forward(self, hidden: torch.Tensor, encoder_outputs: torch.Tensor) -> torch.Tensor:
        attn_energies = torch.sum(hidden * encoder_outputs, dim=2).t()
        return F.softmax(attn_energies, dim=1).unsqueeze(1)


class LuongAttnDecoderRNN(nn.Module):
    def __init__(self, embedding: nn.Embedding, hidden_size: int, output_size: int, n_layers: int = 1,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.n_layers = n_layers
        self.embedding = embedding
        self.embedding_dropout = nn.Dropout(dropout)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout))
        self.concat = nn.Linear(hidden_size * 2, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)
        self.attn = Attn()

    def forward(self, input_step: torch.Tensor, last_hidden: torch.Tensor, encoder_outputs: torch.Tensor) -> Any:
        embedded = self.embedding_dropout(self.embedding(input_step))
        rnn_output, hidden = self.gru(embedded, last_hidden)
        attn_weights = self.attn(rnn_output, encoder_outputs)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
        concat_input = torch.cat((rnn_output.squeeze(0), context.squeeze(1)), 1)
        concat_output = torch.tanh(self.concat(concat_input))
        return F.softmax(self.out(concat_output), dim=1), hidden


def maskNLLLoss(inp: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    nTotal = mask.sum()
    crossEntropy = -torch.log(torch.gather(inp, 1, target.view(-1, 1)).squeeze(1))
    loss = crossEntropy.masked_select(mask).mean()
    return loss, nTotal.item()


class Chatbot(Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.embedding = nn.Embedding(voc.num_words, hidden_size)
        self.encoder = EncoderRNN(hidden_size, self.embedding, encoder_n_layers, dropout)
        self.decoder = LuongAttnDecoderRNN(self.embedding, hidden_size, voc.num_words, decoder_n_layers, dropout)
        self.print_loss, self.printed = 0.0, []  # type: ignore[var-annotated]

    def loss(self, batch: tuple[Any, ...]) -> tuple[torch.Tensor, float]:
        """`train()` from its forward pass to its `loss.backward()`."""
        input_variable, lengths, target_variable, mask, max_target_len = batch
        loss: Any = 0
        print_losses, n_totals = [], 0
        encoder_outputs, encoder_hidden = self.encoder(input_variable, lengths)
        decoder_input = torch.LongTensor([[SOS_token for _ in range(batch_size)]])
        decoder_hidden = encoder_hidden[:self.decoder.n_layers]
        use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False
        for t in range(max_target_len):
            decoder_output, decoder_hidden = self.decoder(decoder_input, decoder_hidden, encoder_outputs)
            if use_teacher_forcing:
                decoder_input = target_variable[t].view(1, -1)
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = torch.LongTensor([[topi[i][0] for i in range(batch_size)]])
            mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
            loss += mask_loss
            print_losses.append(mask_loss.item() * nTotal)
            n_totals += nTotal
        return loss, sum(print_losses) / n_totals

    def report(self, iteration: int, loss: float) -> None:
        self.print_loss += loss
        if iteration % print_every == 0:
            self.printed.append("Iteration: {}; Percent complete: {:.1f}%; Average loss: {:.4f}".format(
                iteration, iteration / n_iteration * 100, self.print_loss / print_every))
            self.print_loss = 0

    def search(self, input_seq: torch.Tensor, input_length: torch.Tensor, max_length: int) -> list[str]:
        """`GreedySearchDecoder.forward` and `evaluate`'s indexes -> words."""
        encoder_outputs, encoder_hidden = self.encoder(input_seq, input_length)
        decoder_hidden = encoder_hidden[:self.decoder.n_layers]
        decoder_input = torch.ones(1, 1, dtype=torch.long) * SOS_token
        all_tokens = torch.zeros([0], dtype=torch.long)
        for _ in range(max_length):
            decoder_output, decoder_hidden = self.decoder(decoder_input, decoder_hidden, encoder_outputs)
            decoder_scores, decoder_input = torch.max(decoder_output, dim=1)
            all_tokens = torch.cat((all_tokens, decoder_input), dim=0)
            decoder_input = torch.unsqueeze(decoder_input, 0)
        return [voc.index2word[token.item()] for token in all_tokens]  # type: ignore[index]

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> None:
        encoder_optimizer, decoder_optimizer = self.optimizers()  # type: ignore[misc]
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        loss, average = self.loss(batch)
        self.manual_backward(loss)
        self.clip_gradients(encoder_optimizer, gradient_clip_val=clip, gradient_clip_algorithm="norm")
        self.clip_gradients(decoder_optimizer, gradient_clip_val=clip, gradient_clip_algorithm="norm")
        encoder_optimizer.step()
        decoder_optimizer.step()
        self.report(batch_idx + 1, average)

    def predict_step(self, batch: Any, batch_idx: int) -> list[str]:
        input_batch, lengths = batch
        return self.search(input_batch, lengths, MAX_LENGTH)

    def configure_optimizers(self) -> Any:
        return [optim.Adam(self.encoder.parameters(), lr=learning_rate),
                optim.Adam(self.decoder.parameters(), lr=learning_rate * decoder_learning_ratio)]


def training_batches() -> list[tuple[Any, ...]]:
    return [batch2TrainData(voc, [random.choice(pairs) for _ in range(batch_size)]) for _ in range(n_iteration)]


def sentences() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`evaluate`'s input batches, for the first four pairs' questions."""
    batches = []
    for pair in pairs[:4]:
        indexes_batch = [indexesFromSentence(voc, pair[0])]
        lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
        batches.append((torch.LongTensor(indexes_batch).transpose(0, 1), lengths))
    return batches


def original(iterations: int = n_iteration) -> tuple[Chatbot, list[list[str]]]:
    random.seed(0)
    torch.manual_seed(0)
    model = Chatbot()
    encoder, decoder = model.encoder, model.decoder
    encoder.train()
    decoder.train()
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=learning_rate)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=learning_rate * decoder_learning_ratio)
    batches = training_batches()
    for iteration in range(1, iterations + 1):
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        loss, average = model.loss(batches[iteration - 1])
        loss.backward()
        _ = nn.utils.clip_grad_norm_(encoder.parameters(), clip)
        _ = nn.utils.clip_grad_norm_(decoder.parameters(), clip)
        encoder_optimizer.step()
        decoder_optimizer.step()
        model.report(iteration, average)
    encoder.eval()
    decoder.eval()
    with torch.no_grad():
        decoded = [model.search(input_batch, lengths, MAX_LENGTH) for input_batch, lengths in sentences()]
    return model, decoded


def ported(iterations: int = n_iteration) -> tuple[Chatbot, list[list[str]], Trainer]:
    random.seed(0)
    torch.manual_seed(0)
    model = Chatbot()
    trainer = Trainer(max_epochs=1, **QUIET)
    trainer.fit(model, training_batches()[:iterations])
    decoded = trainer.predict(model, sentences())
    return model, decoded, trainer  # type: ignore[return-value]


def test_the_port_trains_to_the_tutorials_weights_and_answers_the_same() -> None:
    (model, decoded, trainer), (reference, expected) = ported(), original()
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and len(model.printed) == n_iteration // print_every
    assert decoded == expected
    assert trainer.global_step == 2 * n_iteration  # manual optimization counts both optimizers' steps


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported(n_iteration - 1)[0], original()[0])
