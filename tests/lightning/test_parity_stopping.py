"""When a run stops, and what it did until then, as Lightning, with only the imports changed.

`max_steps` with an int `val_check_interval`, EarlyStopping's `stopping_threshold` and
`divergence_threshold`, `val_check_interval=0.25` with mid-epoch checkpoints and
`configure_callbacks`' EarlyStopping, a callback setting `trainer.should_stop`, an
IterableDataset capped by `limit_train_batches` with the training epoch's outputs. The
`current_epoch` after a stop inside an epoch is a deliberate difference (docs/lightning.md):
those tests are xfail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, both

pytest.importorskip("lightning")

PRECISIONS = ["32-true", "bf16-mixed"]


STEP_BUDGETS = [{}, {"stopping_threshold": 2.3}, {"divergence_threshold": 2.33},
                {"max_steps": 20, "val_check_interval": 5, "check_val_every_n_epoch": 1}]


@pytest.mark.parametrize("options", STEP_BUDGETS, ids=["max_steps", "stopping", "divergence", "per_epoch"])
def test_step_budget(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both("step_budget", tmp_path, **options)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert_same_metrics(ours["val"], theirs["val"])
    assert ours["events"] == theirs["events"]
    assert ours["should_stop"] == theirs["should_stop"] and ours["wait"] == theirs["wait"]


def test_step_budget_bf16(tmp_path: Path) -> None:
    ours, theirs = both("step_budget", tmp_path, "bf16-mixed")
    assert_same_weights(ours["model"], theirs["model"])
    assert_same_metrics(ours["val"], theirs["val"])


@pytest.mark.xfail(strict=True, reason="current_epoch after a stop inside an epoch: Lightning counts the epoch "
                                       "(a deliberate difference, docs/lightning.md)")
@pytest.mark.parametrize("options", STEP_BUDGETS[:3], ids=["max_steps", "stopping", "divergence"])
def test_step_budget_current_epoch(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both("step_budget", tmp_path, **options)
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch


def test_early_stopping_stopped_epoch_when_not_stopped(tmp_path: Path) -> None:
    """Lightning's 0 when it never stopped (was None here)."""
    ours, theirs = both("step_budget", tmp_path)
    assert ours["stopped_epoch"] == theirs["stopped_epoch"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_midepoch_validation_and_checkpoints(precision: str, tmp_path: Path) -> None:
    """val_check_interval=0.25 with limit_val_batches=2, a top-2 ModelCheckpoint saving at the
    mid-epoch validations, configure_callbacks' EarlyStopping stopping inside epoch 1, then
    validate(ckpt_path="best"). current_epoch after that stop: see the xfail below."""
    ours, theirs = both("midepoch_validation", tmp_path, precision)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step == 20
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["validate"], theirs["validate"])
    for key in ("outputs", "files", "best", "batch_sizes"):
        assert ours[key] == theirs[key], key
    assert {k: v for k, v in ours["stopped"].items() if k != "current_epoch"} == \
        {k: v for k, v in theirs["stopped"].items() if k != "current_epoch"}


@pytest.mark.xfail(strict=True, reason="current_epoch after EarlyStopping stops at a mid-epoch validation: ours 1, "
                                       "Lightning 2 (a deliberate difference, docs/lightning.md)")
def test_midepoch_stop_current_epoch(tmp_path: Path) -> None:
    ours, theirs = both("midepoch_validation", tmp_path)
    assert ours["stopped"]["current_epoch"] == theirs["stopped"]["current_epoch"]


def test_custom_stop_weights(tmp_path: Path) -> None:
    """A callback sets trainer.should_stop mid-epoch: the same step, the same weights."""
    ours, theirs = both("custom_stop", tmp_path)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step == ours["stopped_at"] == theirs["stopped_at"]


def test_custom_stop_validates_before_stopping(tmp_path: Path) -> None:
    """should_stop set mid-epoch: one more validation before stopping, as in Lightning. The
    checkpoint names differ by the documented current_epoch rule (Lightning counts the cut
    epoch as done and saves at its end; here it stays unfinished, so a resume finishes it)."""
    ours, theirs = both("custom_stop", tmp_path)
    assert ours["validated_at"] == theirs["validated_at"]
    assert_same_metrics(ours["val"], theirs["val"])
    assert len(ours["files"]) == len(theirs["files"]) and ours["files"] != theirs["files"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_train_epoch_outputs_on_a_stream(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("train_epoch_outputs", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    for key in ("epoch_means", "stopped_epoch", "best", "lr"):
        assert ours[key] == theirs[key], key


def test_train_epoch_outputs_early_stop(tmp_path: Path) -> None:
    ours, theirs = both("train_epoch_outputs", tmp_path, min_delta=0.06)
    assert_same_run(ours, theirs)
    assert ours["trainer"].current_epoch < 8 and ours["stopped_epoch"] == theirs["stopped_epoch"]


def test_stepping_batches_known_in_on_fit_start(tmp_path: Path) -> None:
    """An IterableDataset capped by limit_train_batches: known in on_fit_start (were inf)."""
    ours, theirs = both("train_epoch_outputs", tmp_path)
    assert ours["budget"] == theirs["budget"] == (48, 6)
