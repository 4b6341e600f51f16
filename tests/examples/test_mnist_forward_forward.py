"""pytorch/examples' mnist_forward_forward, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/mnist_forward_forward.py),
and the numbers the script prints are equal.

Manual optimization, one Adam per layer: epoch l trains layer l for FF_EPOCHS steps on the
whole batch (the loader repeats it), its first step computing the previous layer's detached
outputs; the train and test errors by `trainer.test` after fit.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.mnist_forward_forward import FF_EPOCHS, make_ff, original_ff
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", PRECISIONS)
def test_mnist_forward_forward(precision: str) -> None:
    model, (x, y, x_pos, x_neg), test_loader = make_ff()
    trainer = Trainer(precision=precision, max_epochs=len(model.layers), **QUIET)
    trainer.fit(model, [(x_pos, x_neg)] * FF_EPOCHS)
    trainer.test(model, [(x, y)], verbose=False)
    trainer.test(model, [next(iter(test_loader))], verbose=False)
    reference = original_ff(precision)
    assert_same_weights(model, reference)
    assert model.losses == reference.losses and len(model.losses) == 2 * FF_EPOCHS
    assert model.errors == reference.errors
