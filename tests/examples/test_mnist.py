"""pytorch/examples' mnist, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/mnist.py),
and the numbers the script prints are equal.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import PRECISIONS, QUIET, ported_train_test, train_test_original
from tests.helpers.examples.mnist import MnistNet, make_mnist, mnist_data, original_mnist
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
@pytest.mark.parametrize("every", [None, 3], ids=["test-each-epoch", "val_check_interval-3"])
def test_the_port_trains_to_the_originals_weights(precision: str, every: int | None) -> None:
    """Train an epoch, evaluate over the test loader, step the scheduler (with
    `val_check_interval` the evaluation runs every n batches instead)."""
    assert_same_weights(ported_train_test(MnistNet, mnist_data, precision, every),
                        train_test_original(MnistNet, mnist_data, precision, every))


# --dry-run's `break` after the first batch of each epoch is `limit_train_batches=1`.
@pytest.mark.parametrize(("precision", "dry_run", "accel"),
                         [(p, d, False) for p in PRECISIONS for d in (False, True)]
                         + [("fp32", False, True), ("amp", True, True)])
def test_mnist(precision: str, dry_run: bool, accel: bool) -> None:
    model, train_loader, test_loader = make_mnist(accel)
    limits = dict(limit_train_batches=1) if dry_run else {}
    Trainer(precision=precision, max_epochs=2, **limits, **QUIET).fit(model, train_loader, test_loader)
    reference = original_mnist(precision, dry_run, accel)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 2
    assert model.train_losses == reference.train_losses and len(model.train_losses) == (2 if dry_run else 6)


def test_mnist_accel_loaders_with_the_default_sanity_check() -> None:
    """docs/design.md ("Decisions"): a validation loader with persistent workers keeps the iterator the
    sanity check opened (as in Lightning), so its first real validation draws no seed where the
    script's first test pass draws one: the default sanity check ends elsewhere, and
    num_sanity_val_steps=0 (the port above) gives the script's weights."""
    model, train_loader, test_loader = make_mnist(accel=True)
    Trainer(max_epochs=2, **{**QUIET, "num_sanity_val_steps": 2}).fit(model, train_loader, test_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_mnist("fp32", False, True))
