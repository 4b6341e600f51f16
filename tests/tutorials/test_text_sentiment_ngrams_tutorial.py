"""beginner_source/text_sentiment_ngrams_tutorial.py, ported to a LightningModule with this
package's imports (tests/helpers/tutorials/text_sentiment_ngrams.py).

An `nn.EmbeddingBag` fed by a `collate_fn` that concatenates texts of different lengths and
builds their offsets; `clip_grad_norm_(..., 0.1)` as `gradient_clip_val=0.1`; a shuffled
validation loader; a `StepLR` stepped only when the epoch's validation accuracy fell below the
best so far. The port, run here and under Lightning in one process, trains to the weights of
the tutorial's loop (`torch.equal`), prints its lines, follows the same learning rates and
gives the same validation and test accuracies.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (small ops: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import text_sentiment_ngrams as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_port_trains_to_the_tutorials_weights_here_and_under_lightning() -> None:
    reference, accu_test = tutorial.original()
    assert reference.lrs != sorted(reference.lrs) and len(set(reference.lrs)) > 1  # the scheduler both stepped and waited
    for framework in ("ours", "lightning"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's notes on few workers and a shuffled validation loader
            run = load_file(SOURCE, framework).main()
        assert_same_weights(run["model"], reference)
        assert run["model"].printed == reference.printed, framework
        assert run["model"].lrs == reference.lrs
        assert run["test"] == accu_test
        assert f"{run['valid']:.3f}" == reference.printed[-1].split("valid accuracy")[1].strip()


def test_deciding_in_lr_scheduler_step_lags_the_tutorials_rule_by_an_epoch_in_both() -> None:
    """An epoch-interval scheduler steps right after the epoch's last optimizer step, before the
    epoch's validation, here as in Lightning, so `lr_scheduler_step` sees the previous epoch's
    accuracy: deciding there lags the tutorial's rule by one epoch in both packages alike (the
    port decides in `on_validation_epoch_end` instead, and keeps the tutorial's rule)."""
    reference, _ = tutorial.original()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = load_file(SOURCE, "ours").main(decide_when_stepped=True)["model"]
        theirs = load_file(SOURCE, "lightning").main(decide_when_stepped=True)["model"]
    assert_same_weights(ours, theirs)
    assert ours.lrs == theirs.lrs != reference.lrs
    for model in (ours, theirs):
        first_decision = [line for line in model.printed if line.startswith("| end of epoch   1 |")]
        assert first_decision == ["| end of epoch   1 | valid accuracy      nan "]  # no validation ran before it


def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(load_file(SOURCE, "ours").main(epochs=3)["model"], tutorial.original()[0])
