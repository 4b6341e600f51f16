"""pytorch/examples' imagenet, ported to a `Module`.

The port trains to the weights of the script's own loop (tests/helpers/examples/imagenet.py),
and the numbers the script prints are equal.

StepLR is an epoch-interval scheduler: it steps after validation, as the script's does.
workers=2: the random flips are drawn in worker processes seeded from the loader's base seed.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.examples import PRECISIONS, QUIET
from tests.helpers.examples.imagenet import make_imagenet, original_imagenet
from tests.helpers.reference import assert_same_weights
from trainer import Trainer


@pytest.mark.parametrize(("precision", "workers"), [(p, 0) for p in PRECISIONS] + [("fp32", 2)])
def test_imagenet(precision: str, workers: int) -> None:
    model, train_loader, val_loader = make_imagenet(workers)
    trainer = Trainer(precision=precision, max_epochs=3, **QUIET)
    trainer.fit(model, train_loader, val_loader)
    reference = original_imagenet(precision, workers)
    assert_same_weights(model, reference)  # BatchNorm's running statistics included
    assert model.train_summaries == reference.train_summaries and len(model.train_summaries) == 3
    assert model.val_acc1 == reference.val_acc1 and float(model.best_acc1) == float(reference.best_acc1)
    assert len(set(reference.val_acc1)) > 1  # the numbers move: a comparison that could fail
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == [0.1 * 0.1]


@pytest.mark.parametrize(("precision", "workers"), [("fp32", 0), ("amp", 2)])
def test_imagenet_resume(tmp_path: Any, precision: str, workers: int) -> None:
    """The script's --resume, from the Trainer's own checkpoint after epoch 1 and in a fresh
    model, loaders and random state: the uninterrupted script's weights."""
    options = dict(QUIET, enable_checkpointing=True, root_dir=str(tmp_path), run_name="run")
    Trainer(precision=precision, max_epochs=1, **options).fit(*make_imagenet(workers))
    model, train_loader, val_loader = make_imagenet(workers)
    torch.manual_seed(12345)
    Trainer(precision=precision, max_epochs=3, **options).fit(model, train_loader, val_loader, ckpt_path="last")
    reference = original_imagenet(precision, workers)
    assert_same_weights(model, reference)
    assert model.val_acc1 == reference.val_acc1[1:]
