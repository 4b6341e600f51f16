"""`StepTimeBreakdown` on a GPU: CUDA events, read at logging steps only, so no step between
two logging steps synchronises (CUDA's sync debug mode raises on any synchronising call);
each step's phases add up to it, and amp with a fused optimizer keeps its verdict on the device."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from callbacks import StepTimeBreakdown
from tests.gpu._references import GPU, QUIET
from tests.gpu.test_sync_free import Fused, SyncsAreErrors
from tests.helpers.reference import make_data
from trainer import Trainer
from trainer.logging.step_time import PHASES

pytestmark = GPU


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_events_are_read_at_logging_steps_only(precision: str) -> None:
    torch.manual_seed(0)
    watcher, breakdown = SyncsAreErrors(start=3, stop=9), StepTimeBreakdown()
    trainer = Trainer(max_steps=12, precision=precision, device="cuda", log_every_n_steps=10, num_sanity_val_steps=0,
                      callbacks=[watcher, breakdown], **QUIET)
    trainer.fit(Fused(dropout=0.0), DataLoader(make_data(64), batch_size=4))
    assert watcher.checked == 6
    assert breakdown.steps == 10
    (own,) = breakdown.per_rank
    assert math.isclose(sum(own[p] for p in PHASES), own["step"], rel_tol=1e-6) and own["step"] > 0
    assert breakdown.summary
