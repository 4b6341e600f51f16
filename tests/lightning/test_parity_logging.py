"""`self.log` as Lightning logs it, with only the imports changed.

`sync_dist`, `reduce_fx` max/sum, `batch_size`, Python floats, `logger=False`, `on_step` in
validation, `add_dataloader_idx`/`rank_zero_only`/`enable_graph`/`sync_dist_group`; the
progress bar's metrics every step; `callback_metrics` after `test`. Weights are compared with
`torch.equal`, the values exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lightning_projects import assert_same_metrics, assert_same_run, assert_same_weights, both

pytest.importorskip("lightning")

PRECISIONS = ["32-true", "bf16-mixed"]


VAL_KEYS = ("val_mse", "val_mse_epoch", "val_mae_w", "val_worst", "val_count")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_logging_options(precision: str, tmp_path: Path) -> None:
    """sync_dist, reduce_fx max/sum, batch_size, Python floats, logger=False, on_step in
    validation. Mid-fit snapshots are compared on validation keys only (the training epoch's
    values are not there yet in Lightning: docs/lightning.md)."""
    ours, theirs = both("logging_mix", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert ours["progress_bar"] == theirs["progress_bar"] and ours["logged"] == theirs["logged"]
    for mine, other in zip(ours["snapshots"], theirs["snapshots"], strict=True):
        for source in mine:
            assert {k: v for k, v in mine[source].items() if k in VAL_KEYS} == {k: v for k, v in other[source].items() if k in VAL_KEYS}


def test_progress_bar_metrics_every_step(tmp_path: Path) -> None:
    """trainer.progress_bar_metrics read in on_train_batch_end holds every step's value, as Lightning's."""
    ours, theirs = both("logging_mix", tmp_path)
    assert ours["bar_per_step"] == theirs["bar_per_step"]


def test_logging_with_silu(tmp_path: Path) -> None:
    """With a logger the first micro-batch's FLOPs are counted; torch's FlopCounterMode
    decomposes silu_backward, which changed the weights in the last bits."""
    ours, theirs = both("logging_mix", tmp_path, activation="silu")
    assert_same_weights(ours["model"], theirs["model"])


def test_log_keyword_arguments(tmp_path: Path) -> None:
    """self.log(add_dataloader_idx=, rank_zero_only=, enable_graph=, sync_dist_group=) run as Lightning's."""
    ours, theirs = both("log_options", tmp_path)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])


def test_callback_metrics_after_test(tmp_path: Path) -> None:
    ours, theirs = both("logging_mix", tmp_path)
    assert ours["after_test"] == theirs["after_test"] == ["test_mse"]
