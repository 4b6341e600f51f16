"""More pytorch/examples ported to a `Module`, each compared with its original loop.

For each example, tests/helpers/ports.py writes the original script's loop as the example
writes it (its optimizer and scheduler, `model.train()`/`model.eval()`, `torch.no_grad()`,
its per-epoch test pass, its seed, its loaders' shuffling) and the model it trains; the tests
here train the same model as a `Module` with `Trainer(...)` on the same seed and data and
compare the final weights with `torch.equal`, and the evaluation numbers the script prints
with `==` (the port computes them the script's way, so equal weights and equal random draws
give equal numbers).

Trainer options every port uses (QUIET):
- `num_sanity_val_steps=0`: the originals have no sanity check. The sanity check would not
  change the weights (it runs with every random stream restored), but the modules record
  each evaluation's numbers, and it would add a record the script never prints.
- `logger=False`, `enable_checkpointing=False`, `enable_progress_bar=False`: nothing
  written, as the scripts here save nothing.
- `isolate_validation_rng` stays False: the scripts' test passes draw from the torch
  generator (each `iter(DataLoader)` draws a base seed, a shuffling test loader draws its
  order), and the training after them depends on it.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest
import torch

from tests.helpers import ports
from tests.helpers.reference import assert_same_weights
from trainer import Trainer

QUIET: dict[str, Any] = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, device="cpu",
                             num_sanity_val_steps=0, enable_model_summary=False)
PRECISIONS = ["fp32", "amp", "bf16"]


# ------------------------------------------------------------------ time_sequence_prediction
# One LBFGS step per "epoch" on a single full batch (a list as the loader: the script has no
# DataLoader, so nothing draws a loader seed), then the test pass as validation.
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_time_sequence_prediction(precision: str) -> None:
    model = ports.make_sequence()
    train, test = ports.tsp_data()
    Trainer(precision=precision, max_epochs=ports.TSP_STEPS, **QUIET).fit(model, train, test)
    reference = ports.original_time_sequence(precision)
    assert_same_weights(model, reference)
    assert len(model.losses) > ports.TSP_STEPS  # LBFGS evaluated the closure several times per step
    assert model.losses == reference.losses
    assert model.test_losses == reference.test_losses and len(model.test_losses) == ports.TSP_STEPS


def test_time_sequence_prediction_under_amp_is_refused() -> None:
    """GradScaler has no closure step: amp with LBFGS is an error, as documented."""
    model = ports.make_sequence()
    train, test = ports.tsp_data()
    with pytest.raises(Exception, match="(?i)closure"):
        Trainer(precision="amp", max_epochs=1, **QUIET).fit(model, train, test)


# ------------------------------------------------------------------------------ mnist_rnn
# StepLR after each epoch's test pass (an epoch-interval scheduler steps after validation);
# the shuffling test loader draws its order from the torch generator in both; --dry-run's
# `break` after the first batch of each loop is `limit_train_batches=1, limit_val_batches=1`
# (the script still divides the test loss by the whole test set).
@pytest.mark.parametrize("dry_run", [False, True], ids=["full", "dry-run"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_mnist_rnn(precision: str, dry_run: bool) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*dropout2d.*")  # the example's Dropout2d on (N, C) input
        model, train_loader, test_loader = ports.make_mnist_rnn()
        limits = dict(limit_train_batches=1, limit_val_batches=1) if dry_run else {}
        trainer = Trainer(precision=precision, max_epochs=2, **limits, **QUIET)
        trainer.fit(model, train_loader, test_loader)
        reference = ports.original_mnist_rnn(precision, dry_run)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 2
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == [0.1 * 0.7 * 0.7]


# ----------------------------------------------------------------------------- regression
# The script's endless batches are a plain iterable drawing each batch when asked for (a
# DataLoader would draw its own seed from the generator the batches come from); its `break`
# on a small loss is `trainer.should_stop = True`, which ends the epoch after that batch.
# No optimizer: the update is written by hand, so amp (which needs an optimizer to unscale
# and step) does not apply; the script's loop in bf16 is autocast around the forward.
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_regression(precision: str) -> None:
    model, target = ports.make_regression()
    trainer = Trainer(precision=precision, max_epochs=1, **QUIET)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*returned None.*")
        trainer.fit(model, ports.PolynomialBatches(target))
    reference = ports.original_regression(precision)
    assert_same_weights(model, reference)
    assert (model.batches, model.last_loss) == (reference.batches, reference.last_loss)
    if precision == "fp32":  # the fit converges well before the cap: the stop criterion ended it
        assert reference.last_loss < 1e-3 and reference.batches < ports.REGRESSION_CAP


# ------------------------------------------------------------------------------------ gcn
# The whole graph as one batch (a list holding it: the script has no loader), one step per
# epoch, validation each epoch on the train and validation nodes, `trainer.test` for the test
# nodes after training.
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gcn(precision: str) -> None:
    model, batch = ports.make_gcn()
    trainer = Trainer(precision=precision, max_epochs=4, **QUIET)
    trainer.fit(model, [batch], [batch])
    trainer.test(model, [batch], verbose=False)
    reference = ports.original_gcn(precision)
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 4
    assert model.test_result == reference.test_result


# ------------------------------------------------------------------ mnist_forward_forward
# Manual optimization, one Adam per layer: epoch l trains layer l for FF_EPOCHS steps on the
# whole batch (the loader repeats it), its first step computing the previous layer's detached
# outputs; the train and test errors by `trainer.test` after fit.
@pytest.mark.parametrize("precision", PRECISIONS)
def test_mnist_forward_forward(precision: str) -> None:
    model, (x, y, x_pos, x_neg), test_loader = ports.make_ff()
    trainer = Trainer(precision=precision, max_epochs=len(model.layers), **QUIET)
    trainer.fit(model, [(x_pos, x_neg)] * ports.FF_EPOCHS)
    trainer.test(model, [(x, y)], verbose=False)
    trainer.test(model, [next(iter(test_loader))], verbose=False)
    reference = ports.original_ff(precision)
    assert_same_weights(model, reference)
    assert model.losses == reference.losses and len(model.losses) == 2 * ports.FF_EPOCHS
    assert model.errors == reference.errors


# -------------------------------------------------------------------- language_translation
# The example's loss has no label smoothing; 0.1 is the usual Transformer setting and shows
# the per-batch mean over non-padding tokens is kept. `len(list(loader))` in the port's
# epoch-end hooks draws what the script's does.
@pytest.mark.parametrize(("precision", "label_smoothing"),
                         [("fp32", 0.0), ("fp32", 0.1), ("amp", 0.1), ("bf16", 0.1)])
def test_language_translation(precision: str, label_smoothing: float) -> None:
    model = ports.make_translator(label_smoothing)
    assert model.loaders is not None
    trainer = Trainer(precision=precision, max_epochs=2, **QUIET)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(nested tensors|mismatched key_padding_mask).*")
        trainer.fit(model, *model.loaders)
        reference = ports.original_translation(precision, label_smoothing)
    assert_same_weights(model, reference)
    assert model.train_losses == reference.train_losses and len(model.train_losses) == 2
    assert model.val_losses == reference.val_losses


# ------------------------------------------------------------------------ siamese_network
# Pairs drawn with Python's `random` in the dataset: the Trainer draws nothing from it.
@pytest.mark.parametrize("precision", PRECISIONS)
def test_siamese_network(precision: str) -> None:
    model, train_loader, test_loader = ports.make_siamese()
    Trainer(precision=precision, max_epochs=2, **QUIET).fit(model, train_loader, test_loader)
    after_port = random.getstate()
    reference = ports.original_siamese(precision)  # seeds Python's generator as the port did
    assert random.getstate() == after_port  # both consumed the same Python draws
    assert_same_weights(model, reference)
    assert model.results == reference.results and len(model.results) == 2


def test_the_comparison_can_fail() -> None:
    """The siamese port without its test pass ends elsewhere: the test loader's draws matter."""
    model, train_loader, _ = ports.make_siamese()
    Trainer(max_epochs=2, **QUIET).fit(model, train_loader)
    with pytest.raises(AssertionError, match="differs"):
        assert_same_weights(model, ports.original_siamese("fp32"))
