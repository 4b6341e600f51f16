"""pytorch/examples' fast_neural_style (training), ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/fast_neural_style.py,
where a tiny VGG-like network stands in for torchvision's pretrained vgg16 in both runs), the
numbers the script prints are equal, and so are the state dicts it saves during and after training.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.examples.fast_neural_style import make_fast_neural_style, original_fast_neural_style
from tests.helpers.reference import assert_same_weights, weights
from trainer import Trainer



pytestmark = pytest.mark.usefixtures("one_thread")  # tests/examples/conftest.py

# At the script's --content-weight 1e5 and --style-weight 1e10 every amp step of this short run
# overflows (the GradScaler backs off from 2**16 each time): the amp case runs --content-weight 100
# --style-weight 100, where the first two steps are skipped and the other four taken.
@pytest.mark.parametrize(("precision", "loss_weights"),
                         [("fp32", {}), ("amp", dict(content_weight=100, style_weight=100)), ("bf16", {})])
def test_fast_neural_style(precision: str, loss_weights: dict[str, float], tmp_path: Path) -> None:
    (tmp_path / "port").mkdir()
    (tmp_path / "script").mkdir()
    model, train_loader = make_fast_neural_style(tmp_path / "port", **loss_weights)
    initial = weights(model)
    Trainer(precision=precision, max_epochs=2, **QUIET).fit(model, train_loader)
    reference = original_fast_neural_style(precision, tmp_path / "script", **loss_weights)
    assert reference.scale == (2.0 ** 14 if precision == "amp" else None)
    assert_same_weights(model, reference)
    assert not torch.equal(weights(model)["transformer.conv1.conv2d.weight"], initial["transformer.conv1.conv2d.weight"])
    assert model.printed == reference.printed and len(model.printed) == 2  # batch 2 of 3, each epoch
    saved = sorted(p.name for p in (tmp_path / "script").iterdir())
    assert saved == sorted(p.name for p in (tmp_path / "port").iterdir()) and len(saved) == 3
    for name in saved:
        ours, theirs = torch.load(tmp_path / "port" / name), torch.load(tmp_path / "script" / name)
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)
