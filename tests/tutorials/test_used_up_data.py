"""Training data a ported loop hands over as a generator: the tutorials' loops re-create their
data each epoch or use a list; a generator passed with several epochs is used up by the first.

The Trainer then does what the loop over the generator does (later epochs train on nothing,
as in Lightning), and says so once, instead of ending silently with a fraction of the steps.
"""

from __future__ import annotations

import logging

import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.amp_recipe import Net, data, original
from trainer import Trainer


def test_a_generator_used_up_by_the_first_epoch_is_said(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    net = Net()
    trainer = Trainer(max_epochs=3, **QUIET)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        trainer.fit(net, (batch for batch in data()))
    assert trainer.global_step == len(data())  # the first epoch's steps only, as the loop over it
    assert_same_weights(net, original("fp32", epochs=1)[0])
    said = [r.getMessage() for r in caplog.records if "used up" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert "Epoch 1 read no batch" in said[0] and "generator" in said[0] and "a list" in said[0]


def test_data_that_starts_over_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    net = Net()
    with caplog.at_level(logging.WARNING, logger="trainer"):
        Trainer(max_epochs=2, **QUIET).fit(net, data())
    assert not [r for r in caplog.records if "used up" in r.getMessage()]
    assert_same_weights(net, original("fp32", epochs=2)[0])
