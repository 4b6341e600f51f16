"""pytorch/tutorials' quickstart and optimization tutorials, ported to a `Module`.

The port trains to the weights of the tutorials' own loop (tests/helpers/tutorials/quickstart.py)
and prints the same lines; the weights it saves load into a fresh model as the tutorial loads them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.quickstart import NeuralNetwork, fashion_mnist_like, original
from trainer import Trainer


def ported(precision: str, epochs: int = 3) -> NeuralNetwork:
    torch.manual_seed(0)
    model = NeuralNetwork()
    train_dataloader, test_dataloader = fashion_mnist_like()
    Trainer(precision=precision, max_epochs=epochs, **QUIET).fit(model, train_dataloader, test_dataloader)
    return model


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("call_train", [False, True], ids=["quickstart", "optimization_tutorial"])
def test_the_port_trains_to_the_tutorials_weights_and_prints_its_lines(precision: str, call_train: bool) -> None:
    model, reference = ported(precision), original(precision, call_train=call_train)
    assert_same_weights(model, reference)
    assert model.printed == reference.printed
    assert len(model.printed) == 3 * (3 + 1)  # batches 0, 2, 4 and the test pass, per epoch


def test_the_saved_state_dict_loads_as_the_tutorial_loads_it(tmp_path: Path) -> None:
    """`torch.save(model.state_dict(), "model.pth")`, then `NeuralNetwork().load_state_dict(
    torch.load("model.pth"))` and a prediction in eval mode under `no_grad`."""
    model = ported("fp32", epochs=1)
    torch.save(model.state_dict(), tmp_path / "model.pth")
    loaded = NeuralNetwork()
    loaded.load_state_dict(torch.load(tmp_path / "model.pth"))
    assert_same_weights(loaded, original("fp32", epochs=1))
    loaded.eval()
    x = fashion_mnist_like()[1].dataset[0][0]
    with torch.no_grad():
        assert torch.equal(loaded(x), model.eval()(x))


def test_the_comparison_can_fail() -> None:
    """One epoch fewer ends elsewhere."""
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(ported("fp32", epochs=2), original("fp32"))
