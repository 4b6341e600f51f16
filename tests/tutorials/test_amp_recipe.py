"""pytorch/tutorials' automatic mixed precision recipe, ported to a `Module`.

Default precision, "all together" (autocast and a GradScaler), and unscale-then-clip: the
port trains to the weights of the recipe's loops (tests/helpers/tutorials/amp_recipe.py), its
GradScaler ends at the same scale, and a run saved and resumed (the recipe's "Saving/Resuming")
ends where the uninterrupted loop does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.amp_recipe import EPOCHS, Net, data, original
from trainer import Trainer


@pytest.mark.parametrize(("precision", "clip"), [("fp32", None), ("amp", None), ("amp", 0.1), ("bf16", 0.1)])
def test_amp_recipe(precision: str, clip: float | None) -> None:
    torch.manual_seed(0)
    net = Net()
    trainer = Trainer(precision=precision, max_epochs=EPOCHS, gradient_clip_val=clip, **QUIET)
    trainer.fit(net, data())
    reference, scaler = original(precision, clip)
    assert_same_weights(net, reference)
    if precision == "amp":
        assert trainer.precision.scaler.get_scale() == scaler.get_scale()  # type: ignore[attr-defined]


def test_saving_and_resuming(tmp_path: Path) -> None:
    """The recipe saves the scaler's state with the model's and the optimizer's: the Trainer's
    checkpoint holds them all, and a resumed run ends on the uninterrupted loop's weights."""
    torch.manual_seed(0)
    net = Net()
    first = Trainer(precision="amp", max_epochs=1, **QUIET)
    first.fit(net, data())
    first.save_checkpoint(tmp_path / "amp.ckpt")
    checkpoint = torch.load(tmp_path / "amp.ckpt", weights_only=True)
    assert checkpoint["precision"]["state"]["scale"] == original("amp", epochs=1)[1].get_scale()
    resumed = Net()
    Trainer(precision="amp", max_epochs=EPOCHS, **QUIET).fit(resumed, data(), ckpt_path=tmp_path / "amp.ckpt")
    assert_same_weights(resumed, original("amp")[0])
