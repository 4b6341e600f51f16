"""pytorch/examples' regression, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/regression.py),
and the numbers the script prints are equal.

The script's endless batches are a plain iterable drawing each batch when asked for (a
DataLoader would draw its own seed from the generator the batches come from); its `break`
on a small loss is `trainer.should_stop = True`, which ends the epoch after that batch.
No optimizer: the update is written by hand, so amp (which needs an optimizer to unscale
and step) does not apply; the script's loop in bf16 is autocast around the forward.
"""

from __future__ import annotations

import warnings

import pytest

from tests.helpers.examples import QUIET
from tests.helpers.examples.regression import PolynomialBatches, REGRESSION_CAP, make_regression, original_regression
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_regression(precision: str) -> None:
    model, target = make_regression()
    trainer = Trainer(precision=precision, max_epochs=1, **QUIET)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*returned None.*")
        trainer.fit(model, PolynomialBatches(target))
    reference = original_regression(precision)
    assert_same_weights(model, reference)
    assert (model.batches, model.last_loss) == (reference.batches, reference.last_loss)
    if precision == "fp32":  # the fit converges well before the cap: the stop criterion ended it
        assert reference.last_loss < 1e-3 and reference.batches < REGRESSION_CAP
