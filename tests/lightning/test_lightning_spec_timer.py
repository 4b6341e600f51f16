"""The Timer callback as Lightning's own tests specify it (tests_pytorch/callbacks/test_timer.py),
each scenario run under Lightning and here, with only the imports changed, and compared: how a
duration is read, which are refused, and where a zero duration stops a run (with `interval`,
`min_steps`, `min_epochs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_spec import Spec

pytest.importorskip("lightning")

SOURCE = '''
from datetime import timedelta
import torch
from trainer import Trainer
from callbacks import Timer
from trainer.demos.boring_classes import BoringModel


def durations(root):
    """Lightning: test_timer_parse_duration, ..._misconfiguration, test_timer_interval_choice."""
    read = []
    for duration in (None, "00:00:00:22", "12:34:56:65", timedelta(weeks=52, milliseconds=1), {"weeks": 52, "days": 1}):
        read.append(Timer(duration=duration).time_remaining())
    refused = []
    for options in ({"duration": "6:00:00"}, {"duration": "60 minutes"}, {"duration": timedelta(), "interval": "x"}):
        try:
            Timer(**options)
            refused.append(False)
        except Exception:  # Lightning's MisconfigurationException; ours a ValueError
            refused.append(True)
    return read, refused, [Timer(duration=timedelta(), interval=i).time_remaining() for i in ("step", "epoch")]


def zero(root, interval="step", min_steps=None, min_epochs=None):
    """Lightning: test_timer_zero_duration_stop, test_timer_duration_min_steps_override."""
    torch.manual_seed(0)
    trainer = Trainer(default_root_dir=root, callbacks=[Timer(duration=timedelta(0), interval=interval)],
                      min_steps=min_steps, min_epochs=min_epochs, limit_train_batches=4, limit_val_batches=1,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(BoringModel())
    return trainer.global_step, trainer.current_epoch
'''

SPEC = Spec(SOURCE, "spec_timer")


def test_durations(tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("durations", tmp_path)
    assert ours == theirs


@pytest.mark.parametrize("options", [
    {"interval": "step"}, {"interval": "epoch"}, {"min_epochs": 2}, {"min_steps": 3}, {"min_steps": 3, "min_epochs": 2},
], ids=["step", "epoch", "min_epochs", "min_steps", "both"])
def test_zero_duration(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = SPEC.compare("zero", tmp_path, **options)
    assert ours == theirs
