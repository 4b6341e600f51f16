"""beginner_source/translation_transformer.py, ported to a LightningModule with this package's
imports (tests/helpers/tutorials/translation_transformer.py).

`nn.Transformer` with padding and causal masks built per batch, a padding-ignoring loss on the
shifted target, dropout drawing from torch's generator between the loaders' seeds: the port,
run here and under Lightning in one process, trains to the weights of the tutorial's loop
(`torch.equal`), prints its train and validation losses, logs the validation loss as its mean
over batches, and decodes the same greedy translation.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (small ops: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import translation_transformer as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_port_trains_to_the_tutorials_weights_here_and_under_lightning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note on the tutorial's float causal mask beside boolean padding masks
        reference, translation = tutorial.original()
    assert len(reference.printed) == tutorial.NUM_EPOCHS
    for framework in ("ours", "lightning"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's note on few loader workers; torch's on nested tensors
            run = load_file(SOURCE, framework).main()
        assert_same_weights(run["model"], reference)
        assert run["model"].printed == reference.printed, framework
        assert f"{run['val_loss']:.3f}" == reference.printed[-1].rsplit(" ", 1)[1]
        assert torch.equal(run["translation"], translation)


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
def test_the_comparison_can_fail() -> None:
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(load_file(SOURCE, "ours").main(epochs=1)["model"], tutorial.original()[0])
