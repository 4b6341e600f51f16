"""pytorch/examples' siamese_network, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/siamese_network.py),
and the numbers the script prints are equal.

Pairs drawn with Python's `random` in the dataset: the Trainer draws nothing from it.
"""

from __future__ import annotations

import random

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.siamese_network import make_siamese, original_siamese
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", PRECISIONS)
def test_siamese_network(precision: str) -> None:
    model, train_loader, test_loader = make_siamese()
    Trainer(precision=precision, max_epochs=2, **QUIET).fit(model, train_loader, test_loader)
    after_port = random.getstate()
    reference = original_siamese(precision)  # seeds Python's generator as the port did
    assert random.getstate() == after_port  # both consumed the same Python draws
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 2


def test_the_comparison_can_fail() -> None:
    """The siamese port without its test pass ends elsewhere: the test loader's draws matter."""
    model, train_loader, _ = make_siamese()
    Trainer(max_epochs=2, **QUIET).fit(model, train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_siamese("fp32"))
