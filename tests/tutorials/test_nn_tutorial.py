"""pytorch/tutorials' "What is torch.nn really?", ported to a `Module`.

Every model the tutorial trains, ported, trains to the weights of the tutorial's own loop
(tests/helpers/tutorials/nn_tutorial.py) and prints the same validation losses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.examples import QUIET
from tests.helpers.reference import assert_same_weights
from tests.helpers.tutorials.nn_tutorial import (
    EPOCHS, ByHandLogistic, Mnist_Logistic, logistic_data, make, original_fit, original_fit_by_hand)
from trainer import Trainer


@pytest.mark.parametrize(("name", "precision"), [("logistic", "fp32"), ("cnn", "fp32"), ("cnn", "bf16"),
                                                 ("sequential", "fp32"), ("wrapped", "fp32"), ("wrapped", "bf16")])
def test_fit_with_validation(name: str, precision: str) -> None:
    """`fit` with `loss_batch`: the `WrappedDataLoader` (not a DataLoader) trains and validates
    as given, its `preprocess` applied to every batch."""
    model, train_dl, valid_dl = make(name)
    trainer = Trainer(precision=precision, max_epochs=EPOCHS, **QUIET)
    trainer.fit(model, train_dl, valid_dl)
    reference = original_fit(name, precision)
    assert_same_weights(model, reference)
    assert model.printed == reference.printed and [e for e, _ in model.printed] == [0, 1]
    # the logged epoch value is the same batch-size-weighted mean, in float32
    assert trainer.callback_metrics["val_loss"] == pytest.approx(model.printed[-1][1], rel=1e-6)


@pytest.mark.parametrize("lr", [0.5, 0.1], ids=["the-tutorials-lr", "lr-0.1"])
def test_the_update_by_hand_is_kept_by_an_optimizer_that_does_it(lr: float) -> None:
    """`p -= p.grad * lr` is ported as a small optimizer doing exactly that (docs/manual_optimization.md)."""
    torch.manual_seed(0)
    model = ByHandLogistic()
    model.lr = lr
    Trainer(max_epochs=EPOCHS, **QUIET).fit(model, logistic_data())
    assert_same_weights(model, original_fit_by_hand(lr))


def test_sgd_is_the_update_by_hand_only_for_a_power_of_two_lr() -> None:
    """`SGD(lr)` computes `p + (-lr) * grad` in one fused multiply-add, `p -= p.grad * lr`
    rounds the product first: the same for the tutorial's lr of 0.5 (the product is exact),
    other last bits for 0.1."""
    for lr in (0.5, 0.1):
        torch.manual_seed(0)
        model = Mnist_Logistic()
        model.lr = lr
        Trainer(max_epochs=EPOCHS, **QUIET).fit(model, logistic_data())
        if lr == 0.5:
            assert_same_weights(model, original_fit_by_hand(lr))
        else:
            with pytest.raises(AssertionError, match="differs"):
                assert_same_weights(model, original_fit_by_hand(lr))


def test_a_run_through_the_wrapped_loader_resumes_mid_epoch(tmp_path: Path) -> None:
    """Stopped after 3 of the first epoch's 6 batches and resumed in a process whose random
    streams are elsewhere: the `WrappedDataLoader` (no sampler of its own to restore) is
    re-read from the epoch's start with the checkpoint's random state, so its inner
    loader shuffles as before, and the run ends on the tutorial's weights and prints."""
    model, train_dl, valid_dl = make("wrapped")
    first = Trainer(max_steps=3, max_epochs=EPOCHS, **QUIET)
    first.fit(model, train_dl, valid_dl)
    first.save_checkpoint(tmp_path / "mid.ckpt")
    resumed, train_dl, valid_dl = make("wrapped")
    torch.manual_seed(99)
    Trainer(max_epochs=EPOCHS, **QUIET).fit(resumed, train_dl, valid_dl, ckpt_path=tmp_path / "mid.ckpt")
    reference = original_fit("wrapped")
    assert_same_weights(resumed, reference)
    assert model.printed + resumed.printed == reference.printed
