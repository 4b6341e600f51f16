"""pytorch/examples' distributed/minGPT-ddp, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/mingpt.py),
and the numbers the script prints are equal.
"""

from __future__ import annotations

import pytest

from tests.helpers.examples import QUIET
from tests.helpers.examples.mingpt import GPT, GPTManual, make_gpt, original_gpt
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize(("precision", "manual"), [("fp32", False), ("bf16", False), ("fp32", True), ("amp", True)])
def test_mingpt(precision: str, manual: bool) -> None:
    model, train_loader, test_loader = make_gpt(GPTManual if manual else GPT)
    clip = {} if manual else dict(gradient_clip_val=1.0)
    Trainer(precision=precision, max_epochs=2, **clip, **QUIET).fit(model, train_loader, test_loader)
    reference = original_gpt(precision)
    assert_same_weights(model, reference)
    assert model.train_losses == reference.train_losses and len(model.train_losses) == 12
    assert model.eval_losses == reference.eval_losses and len(model.eval_losses) == 4


def test_mingpt_amp_with_the_trainers_clipping_is_not_the_script() -> None:
    """Under amp the script clips the scaled gradients; `gradient_clip_val` clips unscaled ones."""
    model, train_loader, test_loader = make_gpt()
    Trainer(precision="amp", max_epochs=2, gradient_clip_val=1.0, **QUIET).fit(model, train_loader, test_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, original_gpt("amp"))
