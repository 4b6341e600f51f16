"""intermediate_source/torchvision_tutorial.py (object detection finetuning) with torchvision's
`engine.train_one_epoch`, ported to a LightningModule with this package's imports
(tests/helpers/tutorials/detection_finetuning.py).

A detector returning a dict of losses, tuples of differently sized images as batches, SGD with
weight decay, an epoch `StepLR` and a per-batch `LinearLR` warm-up on the same optimizer: the
port trains to the weights of the engine's loop (`torch.equal`) and predicts the same, here and
under Lightning. Under amp the engine steps its warm-up also after a step the GradScaler
skipped; the Trainer steps schedulers only after real steps (a deliberate difference,
docs/lightning.md), so the port reaches the engine's weights by stepping the warm-up itself in
`on_train_batch_end`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from tests.examples.conftest import one_thread  # noqa: F401  (small convolutions: one intra-op thread)
from tests.helpers.lightning_projects import assert_same_weights, load_file
from tests.helpers.tutorials import detection_finetuning as tutorial
from trainer.precision import AMP

SOURCE = Path(tutorial.__file__)
pytestmark = pytest.mark.usefixtures("one_thread")


def assert_same_predictions(ours: list[dict[str, torch.Tensor]], theirs: list[dict[str, torch.Tensor]]) -> None:
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_the_port_trains_to_the_engines_weights_here_and_under_lightning() -> None:
    reference, predictions, _ = tutorial.original()
    for framework in ("ours", "lightning"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's note on few loader workers
            run = load_file(SOURCE, framework).main()
        assert_same_weights(run["model"], reference)
        assert_same_predictions(run["predictions"], predictions)


def test_under_amp_the_warm_up_follows_the_real_steps_unless_the_port_steps_it_every_batch() -> None:
    """A large initial scale makes the GradScaler skip the first steps: the engine's warm-up
    advances on them, the Trainer's schedulers don't; stepped from on_train_batch_end, the
    warm-up advances on every batch and the port ends on the engine's weights."""
    scale = 2.0**24
    with pytest.warns(UserWarning, match="before `optimizer.step"):  # PyTorch's note on the skipped first step
        reference, _, warmup = tutorial.original("amp", init_scale=scale)
    port = load_file(SOURCE, "ours")
    with pytest.warns(UserWarning, match="before `optimizer.step"):  # the epoch's StepLR: all of epoch 0 skipped
        plain = port.main(precision=AMP(init_scale=scale))
    skipped = plain["trainer"].precision.scaler  # type: ignore[attr-defined]
    assert skipped.get_scale() < scale  # steps were skipped
    assert plain["warmup"].last_epoch < tutorial.EPOCHS * 4  # the Trainer's warm-up counted only real steps
    with pytest.raises(AssertionError, match="differ"):
        assert_same_weights(plain["model"], reference)
    with pytest.warns(UserWarning, match="before `optimizer.step"):  # the same note: the engine's order
        every = port.main(warmup_every_batch=True, precision=AMP(init_scale=scale))
    assert_same_weights(every["model"], reference)
    # (the predictions differ: trainer.predict runs under the run's autocast, the tutorial's in float32)
    assert every["warmup"].last_epoch == tutorial.EPOCHS * 4 and warmup.last_epoch == 4  # past total_iters: no change
