"""pytorch/examples' gat, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/gat.py),
and the numbers the script prints are equal.

The whole graph as one batch (a list holding it: the script has no loader); validation each
epoch on the train and validation nodes, `trainer.test` on the test nodes after fit.
--dry-run (one epoch) is max_epochs=1; --concat-heads concatenates the first layer's heads.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.gat import make_gat, original_gat
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize(("precision", "epochs", "concat"),
                         [(p, 5, False) for p in PRECISIONS] + [("fp32", 1, False), ("fp32", 3, True)])
def test_gat(precision: str, epochs: int, concat: bool) -> None:
    model, batch = make_gat(concat)
    trainer = Trainer(precision=precision, max_epochs=epochs, **QUIET)
    trainer.fit(model, [batch], [batch])
    trainer.test(model, [batch], verbose=False)
    reference = original_gat(precision, epochs, concat)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == epochs
    assert model.test_result == reference.test_result
