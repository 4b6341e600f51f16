"""intermediate_source/seq2seq_translation_tutorial.py (the attention decoder version) at toy size.

The tutorial's `trainIters` draws all its training pairs first (`random.choice(pairs)`),
then trains one pair per iteration: an `EncoderRNN` (embedding, GRU) read token by token into
`encoder_outputs`, an `AttnDecoderRNN` (dropout, attention over those outputs, GRU) fed its
SOS token, teacher forcing decided per pair by `random.random() < teacher_forcing_ratio`
(else the decoder's own top guess, stopping at EOS), the losses summed, one backward, and
two SGD optimizers, one per network, stepped encoder first. It prints the average loss every
`PRINT_EVERY` iterations. After training, `evaluateRandomly` draws pairs and decodes them
under `no_grad` (the models never put in eval mode, so the decoder's dropout draws).

The port is one `Module` holding both networks, with manual optimization: the two optimizers
from `configure_optimizers`, stepped as the tutorial does, and the list of drawn pairs as
its training data (one pair per step, as the tutorial reads them). Sizes: vocabularies of 10 and 12
words, hidden 16 instead of 256, sentences of up to 4 words, 24 iterations.
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer import Module

SOS_token, EOS_token = 0, 1
MAX_LENGTH, HIDDEN, N_IN, N_OUT, N_ITERS, PRINT_EVERY = 5, 16, 10, 12, 24, 6
teacher_forcing_ratio = 0.5


def make_pairs() -> list[tuple[list[int], list[int]]]:
    """Sentence pairs as word indexes (without EOS), the same every call."""
    rng = random.Random(0)
    return [([rng.randrange(2, N_IN) for _ in range(rng.randint(1, MAX_LENGTH - 1))],
             [rng.randrange(2, N_OUT) for _ in range(rng.randint(1, MAX_LENGTH - 1))]) for _ in range(12)]


pairs = make_pairs()


def tensorFromSentence(indexes: list[int]) -> torch.Tensor:
    return torch.tensor(indexes + [EOS_token], dtype=torch.long).view(-1, 1)


def tensorsFromPair(pair: tuple[list[int], list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    return tensorFromSentence(pair[0]), tensorFromSentence(pair[1])


class EncoderRNN(nn.Module):
    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size)

    def forward(self, input: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embedded = self.embedding(input).view(1, 1, -1)
        output, hidden = self.gru(embedded, hidden)
        return output, hidden

    def initHidden(self) -> torch.Tensor:
        return torch.zeros(1, 1, self.hidden_size)


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size: int, output_size: int, dropout_p: float = 0.1,
                 max_length: int = MAX_LENGTH) -> None:
        super().__init__()
        self.hidden_size, self.output_size, self.dropout_p, self.max_length = (
            hidden_size, output_size, dropout_p, max_length)
        self.embedding = nn.Embedding(self.output_size, self.hidden_size)
        self.attn = nn.Linear(self.hidden_size * 2, self.max_length)
        self.attn_combine = nn.Linear(self.hidden_size * 2, self.hidden_size)
        self.dropout = nn.Dropout(self.dropout_p)
        self.gru = nn.GRU(self.hidden_size, self.hidden_size)
        self.out = nn.Linear(self.hidden_size, self.output_size)

    def forward(self, input: torch.Tensor, hidden: torch.Tensor,
                encoder_outputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        embedded = self.embedding(input).view(1, 1, -1)
        embedded = self.dropout(embedded)
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = torch.cat((embedded[0], attn_applied[0]), 1)
        output = self.attn_combine(output).unsqueeze(0)
        output = F.relu(output)
        output, hidden = self.gru(output, hidden)
        output = F.log_softmax(self.out(output[0]), dim=1)
        return output, hidden, attn_weights


class Seq2Seq(Module):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.encoder = EncoderRNN(N_IN, HIDDEN)
        self.decoder = AttnDecoderRNN(HIDDEN, N_OUT, dropout_p=0.1)
        self.criterion = nn.NLLLoss()
        self.print_loss_total, self.printed = 0.0, []  # type: ignore[var-annotated]

    def loss(self, input_tensor: torch.Tensor, target_tensor: torch.Tensor) -> torch.Tensor:
        """`train()` between its `zero_grad` and its backward."""
        encoder, decoder = self.encoder, self.decoder
        encoder_hidden = encoder.initHidden()
        input_length, target_length = input_tensor.size(0), target_tensor.size(0)
        encoder_outputs = torch.zeros(MAX_LENGTH, encoder.hidden_size)
        loss: Any = 0
        for ei in range(input_length):
            encoder_output, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
            encoder_outputs[ei] = encoder_output[0, 0]
        decoder_input = torch.tensor([[SOS_token]])
        decoder_hidden = encoder_hidden
        use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False
        if use_teacher_forcing:
            for di in range(target_length):
                decoder_output, decoder_hidden, decoder_attention = decoder(
                    decoder_input, decoder_hidden, encoder_outputs)
                loss += self.criterion(decoder_output, target_tensor[di])
                decoder_input = target_tensor[di]
        else:
            for di in range(target_length):
                decoder_output, decoder_hidden, decoder_attention = decoder(
                    decoder_input, decoder_hidden, encoder_outputs)
                topv, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze().detach()
                loss += self.criterion(decoder_output, target_tensor[di])
                if decoder_input.item() == EOS_token:
                    break
        return loss

    def record(self, iter: int, loss: float) -> None:
        self.print_loss_total += loss
        if iter % PRINT_EVERY == 0:
            self.printed.append("(%d %d%%) %.4f" % (iter, iter / N_ITERS * 100, self.print_loss_total / PRINT_EVERY))
            self.print_loss_total = 0

    # the port
    def training_step(self, batch: Any, batch_idx: int) -> None:
        input_tensor, target_tensor = batch
        encoder_optimizer, decoder_optimizer = self.optimizers()  # type: ignore[misc]
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        loss = self.loss(input_tensor, target_tensor)
        self.manual_backward(loss)
        encoder_optimizer.step()
        decoder_optimizer.step()
        self.record(batch_idx + 1, loss.item() / target_tensor.size(0))

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.encoder.parameters(), lr=0.01),
                torch.optim.SGD(self.decoder.parameters(), lr=0.01)]

    def evaluate(self, sentence: list[int]) -> list[int]:
        """The tutorial's `evaluate`: greedy decoding under `no_grad`."""
        with torch.no_grad():
            input_tensor = tensorFromSentence(sentence)
            encoder_hidden = self.encoder.initHidden()
            encoder_outputs = torch.zeros(MAX_LENGTH, self.encoder.hidden_size)
            for ei in range(input_tensor.size(0)):
                encoder_output, encoder_hidden = self.encoder(input_tensor[ei], encoder_hidden)
                encoder_outputs[ei] += encoder_output[0, 0]
            decoder_input, decoder_hidden, decoded = torch.tensor([[SOS_token]]), encoder_hidden, []
            for _ in range(MAX_LENGTH):
                decoder_output, decoder_hidden, _ = self.decoder(decoder_input, decoder_hidden, encoder_outputs)
                topv, topi = decoder_output.data.topk(1)
                decoded.append(topi.item())
                if topi.item() == EOS_token:
                    break
                decoder_input = topi.squeeze().detach()
            return decoded

    def evaluateRandomly(self, n: int = 4) -> list[list[int]]:
        return [self.evaluate(random.choice(pairs)[0]) for _ in range(n)]


def draw_training_pairs() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [tensorsFromPair(random.choice(pairs)) for i in range(N_ITERS)]


def original() -> Seq2Seq:
    random.seed(0)
    torch.manual_seed(0)
    model = Seq2Seq()
    encoder_optimizer, decoder_optimizer = model.configure_optimizers()
    training_pairs = draw_training_pairs()
    for iter in range(1, N_ITERS + 1):
        input_tensor, target_tensor = training_pairs[iter - 1]
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        loss = model.loss(input_tensor, target_tensor)
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        model.record(iter, loss.item() / target_tensor.size(0))
    return model
