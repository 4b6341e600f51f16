"""beginner_source/hyperparameter_tuning_tutorial.py's training function without Ray, ported to a
LightningModule with this package's imports (tests/helpers/tutorials/hyperparameter_tuning.py).

A configurable network, an 80/20 `random_split` drawn from torch's generator, shuffled
training and validation loaders, and after each epoch the validation loss as the mean of the
batches' losses (a short last batch weighs as much as a full one) and the accuracy over all
samples. Run here and under Lightning in one process, the port trains to the weights of the
tutorial's function (`torch.equal`) and reports its values after every epoch, exactly.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import hyperparameter_tuning as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_port_trains_to_the_functions_weights_and_reports_its_values() -> None:
    reference, reported = tutorial.original()
    assert len(reported) == tutorial.EPOCHS
    for framework in ("ours", "lightning"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's notes on few workers and a shuffled validation loader
            run = load_file(SOURCE, framework).main()
        assert_same_weights(run["model"], reference)
        assert run["reported"] == reported, framework


def test_the_comparison_can_fail() -> None:
    """The validation set (8 samples in batches of 3) ends on a short batch: over the same
    batches, the mean weighted by batch size (`self.log`'s default) is another number than the
    tutorial's mean over batches."""
    run = load_file(SOURCE, "ours").main(epochs=1)
    model, trainer = run["model"], run["trainer"]
    torch.manual_seed(1)
    per_batch = trainer.validate(model, trainer.val_dataloaders, verbose=False)
    model.log = lambda name, value, **kwargs: type(model).log(model, name, value)  # type: ignore[method-assign]
    torch.manual_seed(1)
    weighted = trainer.validate(model, trainer.val_dataloaders, verbose=False)
    assert weighted["accuracy"] == per_batch["accuracy"] and weighted["loss"] != per_batch["loss"]
