"""pytorch/examples' vae, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/vae.py),
and the numbers the script prints are equal.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.examples import QUIET_WITH_SANITY_CHECK, ported_train_test, train_test_original
from tests.helpers.examples.vae import VAE, vae_data
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize("precision", ["fp32", "amp", "bf16"])
@pytest.mark.parametrize("every", [None, 3], ids=["test-each-epoch", "val_check_interval-3"])
def test_the_port_trains_to_the_originals_weights(precision: str, every: int | None) -> None:
    """Train an epoch, evaluate over the test loader, step the scheduler (with
    `val_check_interval` the evaluation runs every n batches instead)."""
    assert_same_weights(ported_train_test(VAE, vae_data, precision, every),
                        train_test_original(VAE, vae_data, precision, every))


def test_the_comparison_can_fail() -> None:
    """The original without its test pass ends elsewhere: validation's draws matter here."""
    model = ported_train_test(VAE, vae_data, "fp32", None)
    torch.manual_seed(1)
    reference = VAE()
    train_loader, _ = vae_data()
    Trainer(max_epochs=2, **QUIET_WITH_SANITY_CHECK).fit(reference, train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, reference)
