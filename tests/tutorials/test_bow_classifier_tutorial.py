"""beginner_source/nlp/deep_learning_tutorial.py's bag-of-words classifier, ported to a
LightningModule with this package's imports (tests/helpers/tutorials/bow_classifier.py).

One sentence per step, its bag-of-words vector built in `training_step`: the port trains to the
weights of the tutorial's loop (`torch.equal`) and predicts the test sentences' log-probabilities
it prints, here (given the lists of pairs themselves, or a `DataLoader` over them) and under
Lightning (the `DataLoader`: Lightning reads a list as several loaders).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import bow_classifier as tutorial

SOURCE = Path(tutorial.__file__)


def test_the_port_trains_to_the_tutorials_weights_here_and_under_lightning() -> None:
    reference, printed = tutorial.original()
    assert not torch.equal(printed[2], printed[5])  # training moved the column of "creo"
    for framework, as_list in (("ours", True), ("ours", False), ("lightning", False)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's note on few loader workers
            run = load_file(SOURCE, framework).main(as_list=as_list)
        assert_same_weights(run["model"], reference)
        assert all(torch.equal(a, b) for a, b in zip(run["printed"], printed, strict=True)), framework


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(load_file(SOURCE, "ours").main(epochs=tutorial.EPOCHS - 1)["model"], tutorial.original()[0])
