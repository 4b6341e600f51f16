"""beginner_source/nlp/advanced_tutorial.py (the Bi-LSTM CRF), ported to a LightningModule with
this package's imports (tests/helpers/tutorials/bilstm_crf.py).

One sentence per step from a plain list of (words, tags) pairs, a one-element negative
log-likelihood from Python loops over tags, SGD with weight decay, and a random LSTM state drawn
in every forward: the port, run here and under Lightning in one process, trains to the weights
of the tutorial's loop (`torch.equal`) and decodes the same Viterbi score and path after
training (`trainer.predict`). The list of pairs itself can be the training data here (a list of
batches, as a `for` loop reads it); Lightning reads a list as several loaders, so the shared
port gives it a `DataLoader` over the list.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (small ops: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import bilstm_crf as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_port_trains_to_the_tutorials_weights_here_and_under_lightning() -> None:
    reference, printed = tutorial.original()
    assert printed[0][1] != printed[1][1] or not torch.equal(printed[0][0], printed[1][0])
    for framework, data in (("ours", "list"), ("ours", "loader"), ("lightning", "loader")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's note on few loader workers
            run = load_file(SOURCE, framework).main(data=data)
        assert_same_weights(run["model"], reference)
        assert [(torch.equal(score, expected), path) for (score, path), (expected, _) in zip(run["printed"], printed, strict=True)] \
            == [(True, path) for _, path in printed], framework
        assert run["trainer"].global_step == tutorial.EPOCHS * len(tutorial.training_data)


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(load_file(SOURCE, "ours").main(epochs=tutorial.EPOCHS - 1)["model"], tutorial.original()[0])
