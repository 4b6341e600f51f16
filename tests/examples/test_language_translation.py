"""pytorch/examples' language_translation, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/language_translation.py),
and the numbers the script prints are equal.

The example's loss has no label smoothing; 0.1 is the usual Transformer setting and shows
the per-batch mean over non-padding tokens is kept. `len(list(loader))` in the port's
epoch-end hooks draws what the script's does.
"""

from __future__ import annotations

import warnings

import pytest

from tests.helpers.examples import QUIET
from tests.helpers.examples.language_translation import make_translator, original_translation
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize(("precision", "label_smoothing"),
                         [("fp32", 0.0), ("fp32", 0.1), ("amp", 0.1), ("bf16", 0.1)])
def test_language_translation(precision: str, label_smoothing: float) -> None:
    model = make_translator(label_smoothing)
    assert model.loaders is not None
    trainer = Trainer(precision=precision, max_epochs=2, **QUIET)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(nested tensors|mismatched key_padding_mask).*")
        trainer.fit(model, *model.loaders)
        reference = original_translation(precision, label_smoothing)
    assert_same_weights(model, reference)
    assert model.train_losses == reference.train_losses and len(model.train_losses) == 2
    assert model.val_losses == reference.val_losses
