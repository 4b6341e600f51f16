"""pytorch/examples' time_sequence_prediction, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/time_sequence_prediction.py),
and the numbers the script prints are equal.

One LBFGS step per "epoch" on a single full batch (a list as the loader: the script has no
DataLoader, so nothing draws a loader seed), then the test pass as validation.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import QUIET
from tests.helpers.examples.time_sequence_prediction import TSP_STEPS, make_sequence, original_time_sequence, tsp_data
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_time_sequence_prediction(precision: str) -> None:
    model = make_sequence()
    train, test = tsp_data()
    Trainer(precision=precision, max_epochs=TSP_STEPS, **QUIET).fit(model, train, test)
    reference = original_time_sequence(precision)
    assert_same_weights(model, reference)
    assert len(model.losses) > TSP_STEPS  # LBFGS evaluated the closure several times per step
    assert model.losses == reference.losses
    assert model.test_losses == reference.test_losses and len(model.test_losses) == TSP_STEPS


def test_time_sequence_prediction_under_amp_is_refused() -> None:
    """GradScaler has no closure step: amp with LBFGS is an error, as documented."""
    model = make_sequence()
    train, test = tsp_data()
    with pytest.raises(Exception, match="(?i)closure"):
        Trainer(precision="amp", max_epochs=1, **QUIET).fit(model, train, test)
