"""pytorch/examples' word_language_model, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/word_language_model.py),
and the numbers the script prints are equal.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.examples import QUIET_WITH_SANITY_CHECK
from tests.helpers.examples.word_language_model import RNNModel, corpus, original_lm
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
def test_a_ported_word_language_model_trains_to_the_originals_weights(precision: str) -> None:
    torch.manual_seed(1)
    model = RNNModel()
    train, val = corpus()
    Trainer(precision=precision, max_epochs=2, gradient_clip_val=0.25, **QUIET_WITH_SANITY_CHECK).fit(model, train, val)
    assert_same_weights(model, original_lm(precision))
