"""pytorch/examples' super_resolution, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/super_resolution.py),
and the numbers the script prints are equal.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.super_resolution import make_super_resolution, original_super_resolution
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize(("precision", "threads"), [(p, 0) for p in PRECISIONS] + [("bf16", 2)])
def test_super_resolution(precision: str, threads: int) -> None:
    model, train_loader, test_loader = make_super_resolution(threads)  # --threads: the loaders' workers
    Trainer(precision=precision, max_epochs=2, **QUIET).fit(model, train_loader, test_loader)
    reference = original_super_resolution(precision, threads=threads)
    assert_same_weights(model, reference)
    assert model.psnrs == reference.psnrs and len(model.psnrs) == 2
    assert model.epoch_losses == reference.epoch_losses


def test_the_comparison_can_fail() -> None:
    """The super-resolution port without its test loader ends elsewhere: iterating the test
    loader draws a base seed, and the next epoch's shuffle follows from it."""
    model, train_loader, _ = make_super_resolution()
    Trainer(max_epochs=2, **QUIET).fit(model, train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_super_resolution("fp32"))
