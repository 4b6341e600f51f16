"""pytorch/examples' mnist_rnn, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/mnist_rnn.py),
and the numbers the script prints are equal.

StepLR after each epoch's test pass (an epoch-interval scheduler steps after validation);
the shuffling test loader draws its order from the torch generator in both; --dry-run's
`break` after the first batch of each loop is `limit_train_batches=1, limit_val_batches=1`
(the script still divides the test loss by the whole test set).
"""

from __future__ import annotations

import warnings

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.mnist_rnn import make_mnist_rnn, original_mnist_rnn
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("dry_run", [False, True], ids=["full", "dry-run"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_mnist_rnn(precision: str, dry_run: bool) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*dropout2d.*")  # the example's Dropout2d on (N, C) input
        model, train_loader, test_loader = make_mnist_rnn()
        limits = dict(limit_train_batches=1, limit_val_batches=1) if dry_run else {}
        trainer = Trainer(precision=precision, max_epochs=2, **limits, **QUIET)
        trainer.fit(model, train_loader, test_loader)
        reference = original_mnist_rnn(precision, dry_run)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 2
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == [0.1 * 0.7 * 0.7]
