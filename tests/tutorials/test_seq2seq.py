"""pytorch/tutorials' seq2seq translation (attention decoder), ported to a `Module`.

Two networks with an SGD optimizer each, teacher forcing by `random.random()`, the losses
summed over the target: the port (manual optimization) trains to the weights of the
tutorial's own loop (tests/helpers/tutorials/seq2seq.py), prints the same averages, and decodes
the same random pairs afterwards.
"""

from __future__ import annotations

import random

import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.seq2seq import N_ITERS, PRINT_EVERY, Seq2Seq, draw_training_pairs, original
from trainer import Trainer


def test_seq2seq() -> None:
    random.seed(0)
    torch.manual_seed(0)
    model = Seq2Seq()
    trainer = Trainer(max_epochs=1, **QUIET)
    trainer.fit(model, draw_training_pairs())  # the list trainIters draws, as it is
    decoded = model.evaluateRandomly()
    reference = original()
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and len(model.printed) == N_ITERS // PRINT_EVERY
    assert decoded == reference.evaluateRandomly()
    assert trainer.global_step == 2 * N_ITERS  # manual optimization counts every optimizer's step
