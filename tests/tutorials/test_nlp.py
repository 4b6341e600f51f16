"""pytorch/tutorials' NLP tutorials (LSTM tagger, N-gram language model), ported to a `Module`.

Lists of words as training data, one example per step: the ports train to the weights of the
tutorials' loops (tests/helpers/tutorials/nlp.py) and print the same numbers.
"""

from __future__ import annotations

import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.nlp import (
    CONTEXT_SIZE, EMBEDDING_DIM, HIDDEN_DIM, NGRAM_EMBEDDING_DIM, NGRAM_EPOCHS, TAGGER_EPOCHS, LSTMTagger,
    NGramLanguageModeler, ngrams, original_ngram, original_tagger, tag_to_ix, training_data, vocab, word_to_ix)
from trainer import Trainer


def test_lstm_tagger() -> None:
    torch.manual_seed(1)
    model = LSTMTagger(EMBEDDING_DIM, HIDDEN_DIM, len(word_to_ix), len(tag_to_ix))
    model.print_scores()
    Trainer(max_epochs=TAGGER_EPOCHS, **QUIET).fit(model, training_data)
    model.print_scores()
    reference = original_tagger()
    assert_same_weights(model, reference)
    assert all(torch.equal(a, b) for a, b in zip(model.printed, reference.printed, strict=True))


def test_ngram_language_model() -> None:
    torch.manual_seed(1)
    model = NGramLanguageModeler(len(vocab), NGRAM_EMBEDDING_DIM, CONTEXT_SIZE)
    Trainer(max_epochs=NGRAM_EPOCHS, **QUIET).fit(model, ngrams)
    reference = original_ngram()
    assert_same_weights(model, reference)
    assert model.losses == reference.losses and len(model.losses) == NGRAM_EPOCHS
