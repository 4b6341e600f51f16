"""advanced_source/neural_style_tutorial.py, ported to a LightningModule with this package's
imports (tests/helpers/tutorials/neural_style.py).

L-BFGS optimizes an input image (a parameter of the module) with a closure that clamps it,
evaluates content and style losses hooked into a CNN kept in eval mode and backpropagates; the
tutorial's `while run[0] <= num_steps` becomes `trainer.should_stop`. Under manual
optimization with `optimizer.step(closure=closure)`, the port, run here and under Lightning in
one process, ends on the tutorial's image (`torch.equal`) and prints its loss lines.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (convolutions: one intra-op thread)
from tests.helpers.lightning_projects import load_file
from tests.helpers.tutorials import neural_style as tutorial

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_port_ends_on_the_tutorials_image_here_and_under_lightning() -> None:
    output, scores = tutorial.original()
    assert scores.run[0] > tutorial.NUM_STEPS and len(scores.printed) == 2 * (scores.run[0] // tutorial.PRINT_EVERY)
    for framework in ("ours", "lightning"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # notes on the CNN in eval mode, few loader workers
            run = load_file(SOURCE, framework).main()
        assert torch.equal(run["output"], output), framework
        assert run["model"].scores.printed == scores.printed
        assert run["model"].scores.run == scores.run
        assert not run["model"].model.conv_1.training  # the CNN's layers stay in eval mode, as the tutorial puts them


def test_the_comparison_can_fail() -> None:
    with pytest.warns(UserWarning, match="eval mode"):
        run = load_file(SOURCE, "ours").main(num_steps=tutorial.NUM_STEPS - 25)
    assert not torch.equal(run["output"], tutorial.original()[0])
