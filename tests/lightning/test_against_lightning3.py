"""A third set of Lightning-style projects: only the imports changed -> Lightning's weights.

Each project in tests/helpers/lightning_projects3 exercises features common Lightning code
uses that the first two sets do not: several eval/train/predict loaders, ReduceLROnPlateau
with `monitor` and `limit_val_batches`, a scheduler `frequency`, manual optimization with
`self.lr_schedulers()` and value clipping, dict-returning `training_step` read by a callback,
`grad_norm` in `on_before_optimizer_step`, a resume from `ModelCheckpoint`'s `last.ckpt` with a
stateful callback, `max_steps` with an int `val_check_interval`, EarlyStopping thresholds, a
DataModule's `setup(stage)` branches through fit/validate/test/predict, the `self.log`
options, checkpoint cadences, the overridable optimization hooks, an IterableDataset with
`limit_train_batches`, `training_step` returning None, `val_check_interval=0.25` with mid-epoch
checkpoints and `configure_callbacks`, a curriculum in a DataModule's state across a resume,
a callback setting `trainer.should_stop`. Both versions run in this process;
weights are compared with `torch.equal`, and the steps, epochs and metrics as floats.
Tests marked xfail document a difference from Lightning found by these projects.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.lightning_projects import lightning_source
from tests.helpers.lightning_projects3 import PROJECTS, load_project, project_path

pytest.importorskip("lightning")

PRECISIONS = ["32-true", "bf16-mixed"]


def run(name: str, framework: str, root: Path, precision: str = "32-true", **kwargs: Any) -> dict[str, Any]:
    return load_project(name, framework).main(root / framework, precision, **kwargs)


def both(name: str, root: Path, precision: str = "32-true", **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return run(name, "ours", root, precision, **kwargs), run(name, "lightning", root, precision, **kwargs)


def assert_same_weights(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(other)
    different = [key for key in mine if not torch.equal(mine[key], other[key])]
    assert not different, f"weights differ from Lightning's: {different}"


def assert_same_metrics(ours: dict[str, Any], theirs: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """Every metric Lightning reports (but those in `skip`) has our value, exactly."""
    expected = {key: float(value) for key, value in theirs.items() if key not in skip}
    assert expected
    assert {key: (float(ours[key]) if key in ours else None) for key in expected} == expected


def assert_same_run(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert_same_weights(ours["model"], theirs["model"])
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert ours["trainer"].current_epoch == theirs["trainer"].current_epoch


@pytest.mark.parametrize("name", PROJECTS)
def test_only_the_import_lines_differ(name: str) -> None:
    ours = project_path(name).read_text()
    changed = [line for line in difflib.ndiff(ours.split("\n"), lightning_source(ours).split("\n")) if line[:2] in ("- ", "+ ")]
    assert changed and "lightning" not in ours
    assert all(line[2:].lstrip().startswith(("import ", "from ")) for line in changed)


@pytest.mark.xfail(strict=True, reason="several loaders in one stage: not supported, a ValueError (documented in "
                                       "docs/lightning.md)")
@pytest.mark.parametrize("loaders", ["eval", "train", "predict"])
def test_multiple_loaders(loaders: str, tmp_path: Path) -> None:
    ours, theirs = both("multi_loaders", tmp_path, loaders=loaders)
    assert_same_weights(ours["model"], theirs["model"])
    assert ours.get("seen") == theirs.get("seen")
    if loaders == "eval":
        assert_same_metrics(ours["val"], theirs["val"])  # val_mse/dataloader_idx_0, ..._1
        assert [dict(d) for d in ours["test"]] == theirs["test"]
    if loaders == "predict":
        assert all(torch.equal(a, b) for pa, pb in zip(ours["predictions"], theirs["predictions"], strict=True)
                   for a, b in zip(pa, pb, strict=True))


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


@pytest.mark.parametrize("precision", PRECISIONS)
def test_manual_optimization_with_schedulers(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("manual_schedule", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert ours["backward_calls"] == theirs["backward_calls"] == 48
    assert ours["last_batch_steps"] == theirs["last_batch_steps"] == [6, 12, 18, 24]
    assert ours["lr"] == theirs["lr"]


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
def test_resume_from_last_checkpoint(precision: str, tmp_path: Path) -> None:
    """fit to epoch 2, a new model and Trainer continue from last.ckpt to epoch 4 (loader
    without shuffle): the weights, the StepLR, the top-2 files and the callback's state."""
    ours, theirs = both("resume", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    for key in ("files", "best", "best_score", "batches", "loaded", "lr"):
        assert ours[key] == theirs[key], key
    assert ours["loaded"] == {"batches": 16} and ours["batches"] == 32


def test_resume_with_shuffle_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    resumed = run("resume", "ours", tmp_path / "a", shuffle=True)
    whole = run("resume", "ours", tmp_path / "b", shuffle=True, stop_at=None)
    assert_same_weights(resumed["model"], whole["model"])
    theirs_whole = run("resume", "lightning", tmp_path / "c", shuffle=True, stop_at=None)
    assert_same_weights(whole["model"], theirs_whole["model"])


@pytest.mark.xfail(strict=True, reason="ours restores the random streams from its checkpoint (exact resume); "
                                       "Lightning does not, so a shuffled resume draws another order")
def test_resume_with_shuffle_matches_lightnings_resume(tmp_path: Path) -> None:
    ours, theirs = both("resume", tmp_path, shuffle=True)
    assert_same_weights(ours["model"], theirs["model"])


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
def test_datamodule_stages(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("datamodule_stages", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["validate"], theirs["validate"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert all(torch.equal(a, b) for a, b in zip(ours["predictions"], theirs["predictions"], strict=True))
    names = {"TrainerFn.FITTING": "fit", "TrainerFn.VALIDATING": "validate", "TrainerFn.TESTING": "test",
             "TrainerFn.PREDICTING": "predict"}  # Lightning passes its str enum
    assert ours["stages"] == [names.get(s, s) for s in theirs["stages"]] == ["fit", "validate", "test", "predict"]
    assert ours["hparams"] == theirs["hparams"] and ours["dm_hparams"] == theirs["dm_hparams"]


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


@pytest.mark.parametrize("precision", PRECISIONS)
def test_checkpoint_cadence(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("checkpoint_cadence", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert_same_metrics(ours["test"], theirs["test"])
    assert_same_weights(ours["best_model"], theirs["best_model"])
    for key in ("best", "best_score", "last", "epoch_files", "step_files", "best_k", "extra", "raw_epoch", "raw_step",
                "loaded_extra", "seen"):
        assert ours[key] == theirs[key], key
    assert ours["step_files"] == sorted(f"step={s}.ckpt" for s in range(5, 36, 5))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_optimization_hook_overrides(precision: str, tmp_path: Path) -> None:
    ours, theirs = both("hooks_override", tmp_path, precision)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])
    assert ours["calls"] == theirs["calls"] == {"zero_grad": 24, "before_backward": 24, "scheduler": 24, "clip": 20}
    assert ours["lrs"] == theirs["lrs"]


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


def test_training_step_returning_none(tmp_path: Path) -> None:
    """A skipped window still counts as a step and steps the step-interval schedulers, as in Lightning."""
    ours, theirs = both("skip_batches", tmp_path)
    assert ours["skipped"] == theirs["skipped"] == 6
    assert ours["trainer"].global_step == theirs["trainer"].global_step
    assert ours["files"] == theirs["files"]
    assert_same_weights(ours["model"], theirs["model"])


def test_log_keyword_arguments(tmp_path: Path) -> None:
    """self.log(add_dataloader_idx=, rank_zero_only=, enable_graph=, sync_dist_group=) run as Lightning's."""
    ours, theirs = both("log_options", tmp_path)
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])


def test_manual_optimization_plateau_without_monitor(tmp_path: Path) -> None:
    ours, theirs = both("manual_plateau", tmp_path)
    assert_same_run(ours, theirs)
    assert ours["lrs"] == theirs["lrs"]


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


def test_curriculum_in_datamodule_state_resumes(tmp_path: Path) -> None:
    """A DataModule's train_dataloader() runs after its load_state_dict on resume, as in Lightning."""
    ours, theirs = both("curriculum_resume", tmp_path)
    assert ours["first_call"] == theirs["first_call"] == "load_state_dict"
    assert_same_run(ours, theirs)
    assert_same_metrics(ours["val"], theirs["val"])


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


def test_lr_monitor_values_in_callback_metrics(tmp_path: Path) -> None:
    """LearningRateMonitor's values are in callback_metrics (float32, as Lightning writes them)."""
    ours, theirs = both("plateau", tmp_path)
    assert_same_metrics(ours["val"], theirs["val"])  # 'plateau' included


def test_callback_metrics_after_test(tmp_path: Path) -> None:
    ours, theirs = both("logging_mix", tmp_path)
    assert ours["after_test"] == theirs["after_test"] == ["test_mse"]
