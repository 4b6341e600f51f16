"""pytorch/tutorials' polynomial examples (nn, optim, module), ported to a `Module`: the whole
data at every step, trained to the tutorials' weights, the same losses printed."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.polynomial import N_ITERS, PRINT_EVERY, Polynomial, full_batch, original
from trainer import Trainer


@pytest.mark.parametrize("variant", ["nn", "optim", "module"])
def test_polynomial(variant: str) -> None:
    torch.manual_seed(0)
    model = Polynomial(variant)
    Trainer(max_steps=N_ITERS, **QUIET).fit(model, full_batch(variant))
    reference = original(variant)
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and len(model.printed) == N_ITERS // PRINT_EVERY
