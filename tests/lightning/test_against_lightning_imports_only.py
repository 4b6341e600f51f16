"""Three more Lightning-style projects (tests/helpers/lightning_projects) that move by their
imports alone, each run under Lightning and under ours in this process:

- `hydra_digits`: the Lightning-Hydra template's layout (a net passed in and ignored by
  `save_hyperparameters(logger=False, ...)`, `train/loss` and `val/acc_best` as epoch values,
  ReduceLROnPlateau on `val/loss`, ModelCheckpoint/EarlyStopping on `val/acc`, a
  LearningRateMonitor read at `on_train_start`, `trainer.callback_metrics` held across
  `test(ckpt_path=...)` and `validate`), map-style or a stream without `len()`, limited epochs;
- `twoview_byol`: two random views drawn in the main process, an EMA target, a warm-up in an
  `optimizer_step` override, short runs cut by limits, `max_steps`, a requested stop or
  `fast_dev_run`; the samples each run asked for are compared, not only the weights;
- `gru_family`: three levels of `save_hyperparameters`, backbones built (or reloaded) inside
  another module's `__init__`, a recurrent state in a persistent buffer zeroed at each epoch's
  start, and a resume from a step checkpoint inside an epoch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import both, lightnings_values, load_project
from tests.helpers.reference import assert_same_weights

pytest.importorskip("lightning")


@pytest.mark.parametrize("options", [{}, {"stream": True, "limit": 5}], ids=["map", "stream"])
def test_hydra_template_layout(options: dict[str, Any], tmp_path: Path) -> None:
    ours, theirs = both("hydra_digits", tmp_path, **options)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert torch.equal(ours["after"], theirs["after"])  # the same random draws, no more
    for key in ("val", "test", "validate", "metric_dict", "kept"):
        lightnings_values(ours[key], theirs[key])
    assert ours["kept"] == ours["val"]  # the dict held after fit kept the fit's values through test and validate
    assert ours["objective"] == theirs["objective"]
    for key in ("hparams", "dm_hparams", "lrs_at_start", "lrs", "best", "best_score", "stopped_epoch", "files"):
        assert ours[key] == theirs[key], key
    assert ours["lrs_at_start"] == {"lr-Adam": []} and ours["hparams"] == ["compile", "factor", "lr", "patience",
                                                                            "weight_decay"]


BUDGETS = {"limit_int": {"limit_train_batches": 3}, "limit_fraction": {"limit_train_batches": 0.5},
           "max_steps": {"max_steps": 7}, "should_stop": {"stop_at": 4}, "fast_dev_run": {"fast_dev_run": 2}}


@pytest.mark.parametrize("budget", sorted(BUDGETS))
def test_two_views_read_only_what_they_train_on(budget: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ours, theirs = both("twoview_byol", tmp_path, **BUDGETS[budget])
    assert not [r for r in caplog.records if "nothing was learned" in r.getMessage()]  # the optimizer_step override
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert ours["reads"] == theirs["reads"] and torch.equal(ours["after"], theirs["after"])
    assert len(ours["reads"]) == 8 * ours["trainer"].global_step  # every sample read was trained on
    assert ours["lr"] == theirs["lr"]
    lightnings_values({k: float(v) for k, v in ours["val"].items()}, {k: float(v) for k, v in theirs["val"].items()})


@pytest.mark.parametrize("budget", ["limit_int", "max_steps", "should_stop"])
def test_two_views_from_a_stream_without_len(budget: str, tmp_path: Path) -> None:
    """A stream without len(): Lightning reads one batch ahead, so a stop inside its epoch has
    read one batch more (the documented difference); the steps and weights are the same."""
    ours, theirs = both("twoview_byol", tmp_path, stream=True, **BUDGETS[budget])
    assert_same_weights(ours["model"], theirs["model"])
    assert len(ours["reads"]) == 8 * ours["trainer"].global_step
    ahead = 0 if budget == "limit_int" else 8
    assert theirs["reads"] == ours["reads"] + theirs["reads"][len(theirs["reads"]) - ahead:]
    assert len(theirs["reads"]) == len(ours["reads"]) + ahead


def test_a_module_family_and_backbones_built_inside(tmp_path: Path) -> None:
    ours, theirs = both("gru_family", tmp_path)
    assert_same_weights(ours["model"], theirs["model"])
    assert_same_weights(ours["reloaded"], theirs["reloaded"])  # last.ckpt: step 28, the last every-4 save
    lightnings_values(ours["val"], theirs["val"])
    for key in ("hparams", "hparams_initial", "reloaded_hparams", "inside_hparams", "inside_backbone", "loaded_inside",
                "loaded_backbone", "saved", "files"):
        assert ours[key] == theirs[key], key
    assert ours["hparams"] == {"vocab": 9, "lr": 1.0, "gamma": 0.7, "hidden": 12, "dropout": 0.1, "tie": True}
    assert ours["inside_backbone"]["backbone_hidden"] == 8  # Lightning collects the enclosing __init__'s too


def test_a_module_family_resumed_inside_an_epoch(tmp_path: Path) -> None:
    resumed = load_project("gru_family", "ours").main(tmp_path / "resumed", stop_at=12)
    theirs = load_project("gru_family", "lightning").main(tmp_path / "lightning")
    assert_same_weights(resumed["model"], theirs["model"])  # the GRU state buffer included
    assert resumed["val"]["val_loss"] == theirs["val"]["val_loss"] and resumed["files"] == theirs["files"]
