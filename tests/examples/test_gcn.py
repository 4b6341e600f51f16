"""pytorch/examples' gcn, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/gcn.py),
and the numbers the script prints are equal.

The whole graph as one batch (a list holding it: the script has no loader), one step per
epoch, validation each epoch on the train and validation nodes, `trainer.test` for the test
nodes after training.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.gcn import make_gcn, original_gcn
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gcn(precision: str) -> None:
    model, batch = make_gcn()
    trainer = Trainer(precision=precision, max_epochs=4, **QUIET)
    trainer.fit(model, [batch], [batch])
    trainer.test(model, [batch], verbose=False)
    reference = original_gcn(precision)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 4
    assert model.test_result == reference.test_result
