"""Optimization as Lightning runs it, with only the imports changed.

ReduceLROnPlateau with `monitor` and `limit_val_batches` and a scheduler `frequency`; manual
optimization with `self.lr_schedulers()` (and a plateau without a monitor); dict-returning
`training_step` read by a callback, `grad_norm` in `on_before_optimizer_step`, the loss
callbacks see under accumulation; the overridable optimization hooks; `training_step`
returning None; LearningRateMonitor's values. Weights are compared with `torch.equal`, the
steps, epochs and metrics exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, both

pytest.importorskip("lightning")

PRECISIONS = ["32-true", "bf16-mixed"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("step_frequency", [0, 2])
def test_plateau_scheduler(precision: str, step_frequency: int, tmp_path: Path) -> None:
    """ReduceLROnPlateau on a metric logged in on_validation_epoch_end from collected outputs,
    limit_val_batches=3; with step_frequency=2 also a per-step StepLR every 2nd batch (8
    batches an epoch, so Lightning's in-epoch count and ours agree)."""
    ours, theirs = both("plateau", tmp_path, precision, step_frequency=step_frequency)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"], skip=("plateau", "decay"))  # LearningRateMonitor's keys
    assert ours["lr_history"] == theirs["lr_history"] and ours["lr"] == theirs["lr"]
    assert ours["lr"] < 0.05


def test_lr_monitor_values_in_callback_metrics(tmp_path: Path) -> None:
    """LearningRateMonitor's values are in callback_metrics (float32, as Lightning writes them)."""
    ours, theirs = both("plateau", tmp_path)
    assert_same_metrics(ours["val"], theirs["val"])  # 'plateau' included


@pytest.mark.parametrize("precision", PRECISIONS)
def test_manual_optimization_with_schedulers(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("manual_schedule", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert ours["backward_calls"] == theirs["backward_calls"] == 48
    assert ours["last_batch_steps"] == theirs["last_batch_steps"] == [6, 12, 18, 24]
    assert ours["lr"] == theirs["lr"]


def test_manual_optimization_plateau_without_monitor(tmp_path: Path) -> None:
    ours, theirs = both("manual_plateau", tmp_path)
    assert_same_run(ours, theirs)
    assert ours["lrs"] == theirs["lrs"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_dict_outputs_and_grad_norm(precision: str, tmp_path: Path) -> None:
    """Accumulation 2, clip by value; `*_step` values inside a window are the window's mean
    here (docs/lightning.md), so the per-step training values are left out."""
    ours, theirs = both("dict_outputs", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"], skip=("train_loss_step", "train_acc_step"))
    for key in ("keys", "accs", "batch_idx", "norms", "after_backward"):
        assert ours[key] == theirs[key], key


def test_dict_outputs_without_accumulation(tmp_path: Path) -> None:
    ours, theirs = both("dict_outputs", tmp_path, accumulate=1)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert ours["losses"] == theirs["losses"]


def test_callback_sees_the_normalized_loss(tmp_path: Path) -> None:
    """on_train_batch_end's outputs["loss"] under accumulation is loss / accumulate_grad_batches
    in Lightning."""
    ours, theirs = both("dict_outputs", tmp_path)
    assert ours["losses"] == theirs["losses"]


def test_callback_reads_outputs_loss_of_a_bare_tensor(tmp_path: Path) -> None:
    """A bare-tensor return reaches callbacks as {"loss": detached}."""
    ours, theirs = both("dict_outputs", tmp_path, accumulate=1, returns="tensor")
    assert ours["losses"] == theirs["losses"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_optimization_hook_overrides(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("hooks_override", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert ours["calls"] == theirs["calls"] == {"zero_grad": 24, "before_backward": 24, "scheduler": 24, "clip": 20}
    assert ours["lrs"] == theirs["lrs"]


def test_training_step_returning_none(tmp_path: Path) -> None:
    """A skipped window still counts as a step and steps the step-interval schedulers, as in Lightning."""
    ours, theirs = both("skip_batches", tmp_path)
    assert ours["skipped"] == theirs["skipped"] == 6
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert ours["files"] == theirs["files"]
    assert_same_weights(ours["model"], theirs["model"])
